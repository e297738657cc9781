package translate

import (
	"encoding/binary"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func TestFileOfAndClaimName(t *testing.T) {
	for _, tc := range []struct {
		ann           map[string]string
		content, file string
		ok            bool
		claim         string
	}{
		{map[string]string{AnnotationISOFile: "Debian-12.iso"}, "iso", "Debian-12.iso", true, "debian-12-iso"},
		{map[string]string{AnnotationImportFile: "noble.qcow2"}, "import", "noble.qcow2", true, "import-noble-qcow2"},
		{map[string]string{AnnotationSnippetsFile: "user.yaml"}, "snippets", "user.yaml", true, "snippets-user-yaml"},
		{map[string]string{"other": "x"}, "", "", false, ""},
		{nil, "", "", false, ""},
	} {
		content, file, ok := FileOf(tc.ann)
		if content != tc.content || file != tc.file || ok != tc.ok {
			t.Errorf("FileOf(%v) = %q %q %v", tc.ann, content, file, ok)
		}
		if ok && FileClaimName(content, file) != tc.claim {
			t.Errorf("FileClaimName(%q, %q) = %q, want %q", content, file, FileClaimName(content, file), tc.claim)
		}
	}
	// An ISO image and an import image of one name are two claims.
	if FileClaimName(ContentISO, "a.raw") == FileClaimName(ContentImport, "a.raw") {
		t.Error("iso and import claims of one file name collide")
	}
	if n := FileClaimName(ContentImport, strings.Repeat("x", 80)+".qcow2"); len(n) > 63 {
		t.Errorf("claim name %q is longer than a DNS label", n)
	}
}

func TestImportFormat(t *testing.T) {
	for _, tc := range []struct{ name, want string }{
		{"noble.qcow2", "qcow2"},
		{"disk.img.raw", "raw"},
		{"a+b=c.vmdk", "vmdk"},
		{"appliance.ova", "ova"},
		{"disk.ovf", ""}, // listed by PVE, not uploadable
		{"disk.QCOW2", ""},
		{"disk.img", ""},
		{".qcow2", ""},
		{"", ""},
	} {
		if got := ImportFormat(tc.name); got != tc.want {
			t.Errorf("ImportFormat(%q) = %q, want %q", tc.name, got, tc.want)
		}
	}
	for _, tc := range []struct{ content, file, want string }{
		{"iso", "a.img", "iso"}, {"import", "a.qcow2", "qcow2"}, {"import", "a.img.raw", "raw"}, {"snippets", "u.yaml", "snippet"},
	} {
		if got := FileFormat(tc.content, tc.file); got != tc.want {
			t.Errorf("FileFormat(%q, %q) = %q, want %q", tc.content, tc.file, got, tc.want)
		}
	}
}

// qcow2Header is a qcow2 header of version v, virtual size size, with a
// backing file offset and incompatible features as given.
func qcow2Header(v uint32, size int64, backing, incompat uint64) []byte {
	h := make([]byte, 104)
	copy(h, "QFI\xfb")
	binary.BigEndian.PutUint32(h[4:], v)
	binary.BigEndian.PutUint64(h[8:], backing)
	binary.BigEndian.PutUint64(h[24:], uint64(size))
	binary.BigEndian.PutUint64(h[72:], incompat)
	return h
}

func TestInspectImage(t *testing.T) {
	vmdk := make([]byte, 512)
	copy(vmdk, "KDMV")
	binary.LittleEndian.PutUint64(vmdk[12:], 2048)
	for _, tc := range []struct {
		format string
		head   []byte
		size   int64
		err    string
	}{
		{"raw", []byte("asd"), 0, ""},
		{"qcow2", qcow2Header(3, 10*GiB, 0, 0), 10 * GiB, ""},
		{"qcow2", qcow2Header(2, 3*GiB, 0, 0)[:32], 3 * GiB, ""},
		{"qcow2", []byte("asd"), 0, "qemu-img: Could not open '/dev/pvc/default/x': Image is not in qcow2 format"},
		{"qcow2", qcow2Header(1, GiB, 0, 0), 0, "Unsupported qcow2 version 1"},
		{"qcow2", qcow2Header(3, GiB, 512, 0), 0, "backing file not allowed for untrusted image '/dev/pvc/default/x'!"},
		{"qcow2", qcow2Header(3, GiB, 0, 4), 0, "'data-file' references are not allowed!"},
		{"vmdk", vmdk, 1 << 20, ""},
		{"vmdk", []byte("# Disk DescriptorFile\n"), 0, "Image is not in vmdk format"},
		{"ova", []byte("x"), 0, "unsupported image format 'ova'"},
	} {
		size, err := InspectImage("/dev/pvc/default/x", tc.format, tc.head)
		switch {
		case tc.err == "" && (err != nil || size != tc.size):
			t.Errorf("%s %q: %d, %v; want %d", tc.format, tc.head[:min(8, len(tc.head))], size, err, tc.size)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s %q: %v, want %q", tc.format, tc.head[:min(8, len(tc.head))], err, tc.err)
		}
	}
}

func TestFileDataVolume(t *testing.T) {
	dv := FileDataVolume(FileImport{Content: ContentISO, File: "Debian-12.iso", URL: "https://cdimage.example/debian-12.iso", Namespace: "lab", StorageClass: "local-lvm", ClaimBytes: 2 * GiB, FileSize: 658 * MiB})
	if dv.Name != "debian-12-iso" || dv.Namespace != "lab" || dv.Kind != "DataVolume" {
		t.Fatalf("object %s/%s kind %q", dv.Namespace, dv.Name, dv.Kind)
	}
	if dv.Annotations[AnnotationISOFile] != "Debian-12.iso" || dv.Annotations[AnnotationSourceURL] != "https://cdimage.example/debian-12.iso" ||
		dv.Annotations["cdi.kubevirt.io/storage.bind.immediate.requested"] != "true" ||
		dv.Annotations["cdi.kubevirt.io/storage.deleteAfterCompletion"] != "false" ||
		FileSizeOf(dv.Annotations) != 658*MiB || dv.Annotations[AnnotationVirtualSize] != "" || dv.Annotations[AnnotationFilePending] != "" {
		t.Fatalf("annotations %v", dv.Annotations)
	}
	if dv.Spec.Source == nil || dv.Spec.Source.HTTP == nil || dv.Spec.Source.HTTP.URL != "https://cdimage.example/debian-12.iso" {
		t.Fatalf("source %+v", dv.Spec.Source)
	}
	st := dv.Spec.Storage
	if st == nil || st.StorageClassName == nil || *st.StorageClassName != "local-lvm" || st.Resources.Requests.Storage().Value() != 2*GiB {
		t.Fatalf("storage %+v", st)
	}
	// Files are files: a Filesystem claim, whatever the StorageProfile
	// prefers (Block for topolvm and ceph); its access mode is the
	// profile's.
	if st.AccessModes != nil || st.VolumeMode == nil || *st.VolumeMode != corev1.PersistentVolumeFilesystem {
		t.Fatalf("access mode the storage profile's, volume mode Filesystem: %+v", st)
	}
	if q := st.Resources.Requests[corev1.ResourceStorage]; q.String() != "2Gi" {
		t.Fatalf("size %s", q.String())
	}

	up := FileDataVolume(FileImport{Content: ContentImport, File: "noble.qcow2", URL: "https://x.example/noble.qcow2", Upload: true, Namespace: "default", StorageClass: "local-lvm", ClaimBytes: 4 * GiB, FileSize: 600 * MiB, VirtualSize: 3 * GiB, Pending: "checksum"})
	if up.Name != "import-noble-qcow2" || up.Spec.Source.Upload == nil || up.Spec.Source.HTTP != nil ||
		up.Annotations[AnnotationImportFile] != "noble.qcow2" || VirtualSizeOf(up.Annotations) != 3*GiB || up.Annotations[AnnotationFilePending] != "checksum" {
		t.Fatalf("upload DataVolume %s %+v %v", up.Name, up.Spec.Source, up.Annotations)
	}
}

func TestImportClaimBytes(t *testing.T) {
	if got := ImportClaimBytes(600*MiB, 3*GiB); got != ISOClaimBytes(3*GiB) {
		t.Errorf("qcow2: %d", got)
	}
	if got := ImportClaimBytes(0, 0); got != DefaultISOClaimBytes {
		t.Errorf("unknown: %d", got)
	}
}

func TestClaimInfoOfImage(t *testing.T) {
	claim := func(ann map[string]string, mode corev1.PersistentVolumeMode) *corev1.PersistentVolumeClaim {
		pvc := &corev1.PersistentVolumeClaim{}
		pvc.Annotations = ann
		pvc.Spec.VolumeMode = &mode
		pvc.Spec.Resources.Requests = corev1.ResourceList{corev1.ResourceStorage: *resourceGi(4)}
		return pvc
	}
	fs, block := corev1.PersistentVolumeFilesystem, corev1.PersistentVolumeBlock
	for _, tc := range []struct {
		ann  map[string]string
		mode corev1.PersistentVolumeMode
		want int64
	}{
		{map[string]string{AnnotationImportFile: "a.qcow2", AnnotationFileSize: "600", AnnotationVirtualSize: "3221225472"}, fs, 3 * GiB},
		{map[string]string{AnnotationImportFile: "a.raw", AnnotationFileSize: "1048576"}, fs, MiB},
		{map[string]string{AnnotationImportFile: "a.raw", AnnotationFileSize: "1048576"}, block, 0},
		{map[string]string{AnnotationImportFile: "a.raw"}, fs, 0},
		{map[string]string{AnnotationISOFile: "a.iso", AnnotationFileSize: "1048576"}, fs, 0},
	} {
		ci := ClaimInfoOf(claim(tc.ann, tc.mode))
		if ci.ImageBytes != tc.want || ci.Bytes != 4*GiB {
			t.Errorf("%v %s: %+v, want image %d", tc.ann, tc.mode, ci, tc.want)
		}
	}
}

func resourceGi(n int64) *resource.Quantity { return resource.NewQuantity(n*GiB, resource.BinarySI) }
