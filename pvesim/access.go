package pvesim

import (
	"strings"
)

// allowedLocked reports whether the token has any of privs on path or a
// parent of it. Called with sim.mu held.
func (s *Sim) allowedLocked(path string, privs ...string) bool {
	if s.acl == nil {
		return true
	}
	for p := path; ; {
		for _, have := range s.acl[p] {
			for _, want := range privs {
				if have == want {
					return true
				}
			}
		}
		if p == "/" {
			return false
		}
		if i := strings.LastIndexByte(p, '/'); i > 0 {
			p = p[:i]
		} else {
			p = "/"
		}
	}
}

// permErr is pve-access-control's raise_perm_exc for a check of privs on
// path (any of them when there are several).
func permErr(path string, privs ...string) *apiError {
	return newErr(403, "Permission check failed (%s, %s)", path, strings.Join(privs, "|"))
}

// checkLocked answers nil or the 403 of a failed check.
func (s *Sim) checkLocked(path string, privs ...string) *apiError {
	if s.allowedLocked(path, privs...) {
		return nil
	}
	return permErr(path, privs...)
}

// agentPrivs is what network-get-interfaces needs: VM.Monitor up to PVE
// 8; PVE 9 replaced it with the guest agent privileges (qemu-server
// b92a40ce, src/PVE/API2/Qemu/Agent.pm).
func (s *Sim) agentPrivs() []string {
	if s.opts.Version >= 9 {
		return []string{"VM.GuestAgent.Audit", "VM.GuestAgent.Unrestricted"}
	}
	return []string{"VM.Monitor"}
}
