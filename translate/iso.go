package translate

import (
	"regexp"
	"strings"
)

// ISO images are PVCs: an ISO volume "<storage>:iso/<file>" is the claim
// ISOClaimName(file) in the VM's namespace, annotated with the file name
// (see files.go for the directory storage that lists them).
const (
	// AnnotationISOFile marks a claim (or the DataVolume that makes it)
	// holding an ISO image and names the file PVE clients see.
	AnnotationISOFile = "pve.caddy-proxmox.io/iso-file"
	// AnnotationSourceURL records where a downloaded file came from.
	AnnotationSourceURL = "pve.caddy-proxmox.io/source-url"
)

// CDI annotations a file's DataVolume carries.
const (
	// cdiBindImmediate asks CDI to bind the claim at once even on a
	// WaitForFirstConsumer StorageClass: a download has no consumer yet.
	cdiBindImmediate = "cdi.kubevirt.io/storage.bind.immediate.requested"
	// cdiDeleteAfterCompletion "false" keeps the DataVolume once it
	// succeeded (CDI may garbage collect it otherwise), so the download's
	// state stays readable.
	cdiDeleteAfterCompletion = "cdi.kubevirt.io/storage.deleteAfterCompletion"
)

// DefaultISOClaimBytes is the claim size of a download whose size the
// server did not announce: most installer ISOs fit.
const DefaultISOClaimBytes = 8 * GiB

var (
	contentFileBadRE = regexp.MustCompile(`[^a-zA-Z0-9_.-]`)
	isoExtRE         = regexp.MustCompile(`(?i)[^/]+\.(?:iso|img)$`)
)

// NormalizeContentFilename is pve-storage's normalize_content_filename:
// a trailing newline and any directory part are dropped and every
// character but letters, digits, '_', '.' and '-' becomes '_'.
func NormalizeContentFilename(name string) string {
	name = strings.TrimSuffix(name, "\n")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	return contentFileBadRE.ReplaceAllString(name, "_")
}

// ValidISOFilename tells whether a (normalized) file name has an ISO
// extension, .iso or .img in any case, as download-url and upload require.
func ValidISOFilename(name string) bool { return isoExtRE.MatchString(name) }

// ISOClaimBytes is the claim size for an ISO image of size bytes: the
// image plus a tenth (at least 256 MiB) for the filesystem CDI writes it
// to, rounded up to whole GiB; DefaultISOClaimBytes when size is unknown
// (0 or less).
func ISOClaimBytes(size int64) int64 {
	if size <= 0 {
		return DefaultISOClaimBytes
	}
	margin := max(size/10, 256*MiB)
	if size > (1<<62)-margin {
		return 1 << 62 // absurd, and refused by the storage, not here
	}
	return (size + margin + GiB - 1) / GiB * GiB
}
