//go:build tools

// Package tools pins KubeVirt's own binaries that the test cluster runs
// (testenv/build-binaries.sh builds them from this module).
package tools

import (
	_ "kubevirt.io/kubevirt/cmd/virt-api"
	_ "kubevirt.io/kubevirt/cmd/virt-controller"
)
