#!/usr/bin/python3
"""Drives caddy-proxmox with Debian's python3-proxmoxer, as a user would.

Environment: PVE_HOST (host:port), PVE_AUTH=token|password, PVE_USER,
PVE_TOKEN_NAME, PVE_TOKEN_VALUE, PVE_PASSWORD, PVE_VMID (a free vmid).
Exits non-zero with a message on the first mismatch.
"""
import os
import sys
import time

import urllib3
from proxmoxer import ProxmoxAPI
from proxmoxer.core import ResourceException

urllib3.disable_warnings()


def fail(msg):
    print("FAIL: " + msg, file=sys.stderr)
    sys.exit(1)


def wait(px, upid, timeout=60):
    # What proxmoxer's Tasks.blocking_status does in newer releases: the
    # UPID must split into exactly 9 fields and names the node to poll.
    parts = upid.split(":")
    if len(parts) != 9 or parts[0] != "UPID":
        fail("bad UPID %r" % upid)
    node = parts[1]
    deadline = time.time() + timeout
    while time.time() < deadline:
        st = px.nodes(node).tasks(upid).status.get()
        if st["status"] == "stopped":
            return st["exitstatus"], px.nodes(node).tasks(upid).log.get()
        if "exitstatus" in st:
            fail("running task carries exitstatus: %r" % st)
        time.sleep(0.2)
    fail("task %s did not finish" % upid)


host = os.environ["PVE_HOST"]
user = os.environ["PVE_USER"]
if os.environ["PVE_AUTH"] == "token":
    px = ProxmoxAPI(host, user=user, token_name=os.environ["PVE_TOKEN_NAME"],
                    token_value=os.environ["PVE_TOKEN_VALUE"], verify_ssl=False)
else:
    px = ProxmoxAPI(host, user=user, password=os.environ["PVE_PASSWORD"], verify_ssl=False)

version = px.version.get()
if not version["version"].startswith("8."):
    fail("version %r" % version)
nodes = px.nodes.get()
if not nodes or any(n["status"] != "online" for n in nodes):
    fail("nodes %r" % nodes)
node = nodes[0]["node"]
vms = px.cluster.resources.get(type="vm")
if any(not isinstance(v["vmid"], int) for v in vms):
    fail("vmid must be an int: %r" % vms)

vmid = int(os.environ["PVE_VMID"])
name = "pxr-%d" % vmid
upid = px.nodes(node).qemu.post(vmid=vmid, name=name, cores=1, memory=512,
                                net0="virtio,bridge=vmbr0")
exit_status, _ = wait(px, upid)
if exit_status != "OK":
    fail("create: %s" % exit_status)
listed = [v for v in px.nodes(node).qemu.get() if v["vmid"] == vmid]
if len(listed) != 1 or listed[0]["name"] != name or "template" in listed[0]:
    fail("listing after create: %r" % listed)
cfg = px.nodes(node).qemu(vmid).config.get()
if cfg["memory"] != "512" or cfg["cores"] != 1:
    fail("config %r" % cfg)

exit_status, _ = wait(px, px.nodes(node).qemu(vmid).status.start.post())
if exit_status != "OK":
    fail("start: %s" % exit_status)
if px.nodes(node).qemu(vmid).status.current.get()["status"] != "running":
    fail("not running after start")

exit_status, _ = wait(px, px.nodes(node).qemu(vmid).status.stop.post())
if exit_status != "OK":
    fail("stop: %s" % exit_status)
if px.nodes(node).qemu(vmid).status.current.get()["status"] != "stopped":
    fail("not stopped after stop")

exit_status, log = wait(px, px.nodes(node).qemu(vmid).delete(purge=1))
if exit_status != "OK" or log[-1]["t"] != "TASK OK":
    fail("delete: %s %r" % (exit_status, log))

# A missing VM is PVE's 500 with the config-file text as the reason.
try:
    px.nodes(node).qemu(vmid).status.current.get()
    fail("deleted VM still answers")
except ResourceException as e:
    if e.status_code != 500 or "does not exist" not in str(e):
        fail("missing VM error: %s" % e)

print("proxmoxer flow OK (%s auth)" % os.environ["PVE_AUTH"])
