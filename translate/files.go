package translate

import (
	"encoding/binary"
	"fmt"
	"path"
	"regexp"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	cdiv1 "kubevirt.io/containerized-data-importer-api/pkg/apis/core/v1beta1"
)

// A directory storage (PVE's "local") keeps files, not disks: ISO images,
// disk images to import and snippets. Here each file is a claim in the
// namespace VMs are created in by default, annotated with its content type
// and file name (AnnotationISOFile, AnnotationImportFile,
// AnnotationSnippetsFile) and, when known, the file's size. Whatever
// StorageClass the claim is on, it belongs to the directory storage, never
// to the StorageClass's own storage.

var filesystemMode = corev1.PersistentVolumeFilesystem

// Content types of a directory storage's files.
const (
	ContentISO      = "iso"
	ContentImport   = "import"
	ContentSnippets = "snippets"
)

// Annotations of a file's claim (and of the DataVolume that makes it; CDI
// copies them onto the claim).
const (
	// AnnotationImportFile marks a claim holding a disk image to import
	// (import-from=<storage>:import/<file>) and names the file.
	AnnotationImportFile = "pve.caddy-proxmox.io/import-file"
	// AnnotationSnippetsFile marks a claim holding a snippet.
	AnnotationSnippetsFile = "pve.caddy-proxmox.io/snippets-file"
	// AnnotationFileSize is the file's size in bytes, what PVE lists (the
	// downloaded or uploaded file, not the claim holding it).
	AnnotationFileSize = "pve.caddy-proxmox.io/file-size"
	// AnnotationVirtualSize is the disk size of an image to import, read
	// from its header: what a disk imported from it needs at least.
	AnnotationVirtualSize = "pve.caddy-proxmox.io/virtual-size"
	// AnnotationFilePending marks a file whose transfer is not verified yet
	// (a checksum to compare); it is not listed until the mark is removed,
	// as PVE shows a file only once it is renamed into place.
	AnnotationFilePending = "pve.caddy-proxmox.io/pending"
	// AnnotationChecksum is the checksum a transfer was verified against,
	// "<algorithm>:<hex>", so that a later download of the file with a
	// checksum is answered as PVE answers it for an existing file.
	AnnotationChecksum = "pve.caddy-proxmox.io/checksum"
)

// fileAnnotations name a claim's file per content type.
var fileAnnotations = []struct{ content, key string }{
	{ContentISO, AnnotationISOFile},
	{ContentImport, AnnotationImportFile},
	{ContentSnippets, AnnotationSnippetsFile},
}

// FileAnnotation is the annotation naming a file of content type content,
// "" for types a directory storage does not keep.
func FileAnnotation(content string) string {
	for _, f := range fileAnnotations {
		if f.content == content {
			return f.key
		}
	}
	return ""
}

// FileOf tells which file a claim's (or DataVolume's) annotations name:
// its content type and file name; ok is false for claims that are no file.
func FileOf(annotations map[string]string) (content, file string, ok bool) {
	for _, f := range fileAnnotations {
		if v := annotations[f.key]; v != "" {
			return f.content, v, true
		}
	}
	return "", "", false
}

// FileClaimName is the claim holding a file: ISOClaimName for an ISO image
// (what CD-ROMs refer to), the content type and the file name made a DNS
// label for the others, so that an import image and an ISO image of one
// name do not meet.
func FileClaimName(content, file string) string {
	if content == ContentISO {
		return ISOClaimName(file)
	}
	return ISOClaimName(content + "-" + file)
}

// importFileRE is pve-storage's SAFE_CHAR_CLASS_RE followed by
// UPLOAD_IMPORT_EXT_RE_1: the names upload and download-url accept for
// import content (case-sensitive, as there).
var importFileRE = regexp.MustCompile(`^[a-zA-Z0-9\-.+=_]+\.(ova|qcow2|raw|vmdk)$`)

// ImportFormat is the image format of a (normalized) import file name, ""
// when upload and download-url would refuse it ("invalid filename or wrong
// extension").
func ImportFormat(name string) string {
	if m := importFileRE.FindStringSubmatch(name); m != nil {
		return m[1]
	}
	return ""
}

// FileFormat is the format PVE lists for a file: "iso", the extension of an
// import image, "snippet".
func FileFormat(content, file string) string {
	switch content {
	case ContentISO:
		return "iso"
	case ContentSnippets:
		return "snippet"
	}
	if ext := path.Ext(file); len(ext) > 1 {
		return ext[1:]
	}
	return "raw"
}

// FileSizeOf is the file size the annotations record, 0 when unknown.
func FileSizeOf(annotations map[string]string) int64 {
	n, err := strconv.ParseInt(annotations[AnnotationFileSize], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// VirtualSizeOf is the disk size the annotations record, 0 when unknown.
func VirtualSizeOf(annotations map[string]string) int64 {
	n, err := strconv.ParseInt(annotations[AnnotationVirtualSize], 10, 64)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// ImageHeaderBytes is how much of an image InspectImage reads.
const ImageHeaderBytes = 512

// InspectImage checks that head, the first bytes of the file at path (all
// of a smaller one), is an image of format, as PVE's check of an untrusted
// image (qemu-img info -f <format>) does, and returns its virtual size (0
// for raw: the file's own size). The errors are PVE's and qemu-img's texts.
func InspectImage(path, format string, head []byte) (int64, error) {
	switch format {
	case "raw":
		return 0, nil
	case "qcow2":
		return inspectQcow2(path, head)
	case "vmdk":
		// A monolithic sparse or stream-optimized image: a descriptor
		// file names other files, which an untrusted image may not.
		if len(head) < 20 || string(head[:4]) != "KDMV" {
			return 0, fmt.Errorf("qemu-img: Could not open '%s': Image is not in vmdk format", path)
		}
		return sectors(binary.LittleEndian.Uint64(head[12:20]))
	}
	return 0, fmt.Errorf("unsupported image format '%s'", format)
}

// inspectQcow2 reads a qcow2 header: magic, version, backing file, the
// external data file bit and the virtual size.
func inspectQcow2(path string, head []byte) (int64, error) {
	if len(head) < 32 || string(head[:4]) != "QFI\xfb" {
		return 0, fmt.Errorf("qemu-img: Could not open '%s': Image is not in qcow2 format", path)
	}
	version := binary.BigEndian.Uint32(head[4:8])
	if version != 2 && version != 3 {
		return 0, fmt.Errorf("qemu-img: Could not open '%s': Unsupported qcow2 version %d", path, version)
	}
	if binary.BigEndian.Uint64(head[8:16]) != 0 {
		return 0, fmt.Errorf("backing file not allowed for untrusted image '%s'!", path)
	}
	// Incompatible feature bit 2: the data lives in another file.
	if version == 3 && len(head) >= 80 && binary.BigEndian.Uint64(head[72:80])&4 != 0 {
		return 0, fmt.Errorf("%s: 'data-file' references are not allowed!", path)
	}
	size := binary.BigEndian.Uint64(head[24:32])
	if size > 1<<62 {
		return 0, fmt.Errorf("qemu-img: Could not open '%s': Image is too big", path)
	}
	return int64(size), nil
}

func sectors(n uint64) (int64, error) {
	if n > 1<<53 {
		return 0, fmt.Errorf("image is too big")
	}
	return int64(n) * 512, nil
}

// ImportClaimBytes is the claim size for an image to import: room for its
// disk (the virtual size; the file itself for raw) plus CDI's filesystem
// margin, as ISOClaimBytes; DefaultISOClaimBytes when neither is known.
func ImportClaimBytes(fileSize, virtualSize int64) int64 {
	return ISOClaimBytes(max(fileSize, virtualSize))
}

// FileImport describes a file to bring into a directory storage: CDI
// imports URL over http(s), or, with Upload, the plugin uploads it.
type FileImport struct {
	Content, File string
	URL           string // where it comes from (recorded for uploads too)
	Upload        bool
	Namespace     string
	StorageClass  string
	ClaimBytes    int64
	// FileSize and VirtualSize are recorded when known (> 0).
	FileSize, VirtualSize int64
	// Pending, when set, is AnnotationFilePending's value.
	Pending string
}

// FileDataVolume is the CDI DataVolume that fills the claim of a file
// (FileClaimName), named like it and annotated with the file (which CDI
// copies onto the claim), bound at once and kept after it succeeded.
func FileDataVolume(f FileImport) *cdiv1.DataVolume {
	sc := f.StorageClass
	ann := map[string]string{
		FileAnnotation(f.Content): f.File,
		cdiBindImmediate:          "true",
		cdiDeleteAfterCompletion:  "false",
	}
	if f.URL != "" {
		ann[AnnotationSourceURL] = f.URL
	}
	if f.FileSize > 0 {
		ann[AnnotationFileSize] = strconv.FormatInt(f.FileSize, 10)
	}
	if f.VirtualSize > 0 {
		ann[AnnotationVirtualSize] = strconv.FormatInt(f.VirtualSize, 10)
	}
	if f.Pending != "" {
		ann[AnnotationFilePending] = f.Pending
	}
	src := &cdiv1.DataVolumeSource{HTTP: &cdiv1.DataVolumeSourceHTTP{URL: f.URL}}
	if f.Upload {
		src = &cdiv1.DataVolumeSource{Upload: &cdiv1.DataVolumeSourceUpload{}}
	}
	return &cdiv1.DataVolume{
		TypeMeta: metav1.TypeMeta{APIVersion: cdiv1.SchemeGroupVersion.String(), Kind: "DataVolume"},
		ObjectMeta: metav1.ObjectMeta{
			Name:        FileClaimName(f.Content, f.File),
			Namespace:   f.Namespace,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "caddy-proxmox"},
			Annotations: ann,
		},
		Spec: cdiv1.DataVolumeSpec{
			Source: src,
			Storage: &cdiv1.StorageSpec{
				StorageClassName: &sc,
				// A directory storage holds files: a Filesystem claim (CDI's
				// StorageProfile may prefer Block, as for topolvm and ceph),
				// whose disk.img keeps the image's own size.
				VolumeMode: &filesystemMode,
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceStorage: *resource.NewQuantity(f.ClaimBytes, resource.BinarySI),
				}},
			},
		},
	}
}
