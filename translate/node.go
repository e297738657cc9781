package translate

// maxNodeNameLen bounds sanitised node names to one DNS label, so that they
// stay usable as host names and inside Kubernetes object names.
const maxNodeNameLen = 63

// NodeName maps a Kubernetes node name onto PVE's node grammar
// [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?, which PVE enforces for node path
// parameters and inside UPIDs (no dots or underscores). Every rune outside
// [a-zA-Z0-9] becomes '-', runs of '-' collapse into one, leading and trailing
// '-' are trimmed and the result is cut to 63 characters. A name with nothing
// usable becomes "node". Case is kept; Kubernetes node names are lower case
// anyway.
//
// The mapping is not injective ("a.b" and "a_b" both give "a-b"); callers
// that expose several Kubernetes nodes must detect such collisions.
func NodeName(k8sNodeName string) string {
	buf := make([]byte, 0, len(k8sNodeName))
	dash := true // suppresses leading dashes
	for _, r := range k8sNodeName {
		if isASCIIAlnum(r) {
			buf = append(buf, byte(r))
			dash = false
			continue
		}
		if !dash {
			buf = append(buf, '-')
			dash = true
		}
	}
	if len(buf) > maxNodeNameLen {
		buf = buf[:maxNodeNameLen]
	}
	for len(buf) > 0 && buf[len(buf)-1] == '-' {
		buf = buf[:len(buf)-1]
	}
	if len(buf) == 0 {
		return "node"
	}
	return string(buf)
}

// ValidNodeName reports whether s matches PVE's pve-node grammar
// [a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?, so that node path parameters and
// UPID node fields can be checked the way PVE checks them. Like PVE it does
// not limit the length.
func ValidNodeName(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; c != '-' && !isASCIIAlnum(rune(c)) {
			return false
		}
	}
	return true
}

// isASCIIAlnum reports whether r is in [a-zA-Z0-9].
func isASCIIAlnum(r rune) bool {
	return (r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
}
