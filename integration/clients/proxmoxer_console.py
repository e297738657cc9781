#!/usr/bin/python3
"""A console client as a Python user writes one: proxmoxer for the API,
Debian's python3-websockets for vncwebsocket. Opens the serial console
(termproxy: login line, OK, input, resize, echo) and the VNC display
(vncproxy websocket=1: the RFB version greeting). Exits non-zero on any
difference."""
import asyncio
import os
import ssl
import sys
from urllib.parse import quote

import websockets
from proxmoxer import ProxmoxAPI

host, node, vmid = os.environ["PVE_HOST"], os.environ["PVE_NODE"], os.environ["PVE_VMID"]
user, token_name, token_value = os.environ["PVE_USER"], os.environ["PVE_TOKEN_NAME"], os.environ["PVE_TOKEN_VALUE"]
hostname, port = host.rsplit(":", 1)
px = ProxmoxAPI(hostname, port=int(port), user=user, token_name=token_name, token_value=token_value, verify_ssl=False)
auth = {"Authorization": f"PVEAPIToken={user}!{token_name}={token_value}"}
# websockets 14 renamed extra_headers (Debian 12 ships 10.4, Debian 13 15.x).
headers_kw = "additional_headers" if int(websockets.__version__.split(".")[0]) >= 14 else "extra_headers"
tls = ssl.create_default_context()
tls.check_hostname, tls.verify_mode = False, ssl.CERT_NONE


def url(r):
    return (f"wss://{host}/api2/json/nodes/{node}/qemu/{vmid}/vncwebsocket"
            f"?port={r['port']}&vncticket={quote(r['ticket'], safe='')}")


async def serial():
    r = px.nodes(node).qemu(vmid).termproxy.post()
    async with websockets.connect(url(r), subprotocols=["binary"], ssl=tls, **{headers_kw: auth}) as ws:
        assert ws.subprotocol == "binary", ws.subprotocol
        await ws.send(f"{r['user']}:{r['ticket']}\n".encode())
        ok = await ws.recv()
        assert ok == b"OK", ok
        await ws.send(b"1:100:30:")  # resize
        await ws.send(b"2")  # ping
        await ws.send(b"0:5:hello")
        echoed = b""
        while b"hello" not in echoed:
            echoed += await asyncio.wait_for(ws.recv(), 20)
    task = px.nodes(node).tasks(r["upid"]).status.get()
    print("serial console OK:", echoed, "task", task["status"])


async def vnc():
    r = px.nodes(node).qemu(vmid).vncproxy.post(websocket=1)
    async with websockets.connect(url(r), subprotocols=["binary"], ssl=tls, **{headers_kw: auth}) as ws:
        greeting = await asyncio.wait_for(ws.recv(), 20)
        assert greeting == b"RFB 003.008\n", greeting
    print("vnc OK:", greeting)


asyncio.run(serial())
asyncio.run(vnc())
sys.exit(0)
