//go:build tools

// Package tools pins the OpenTofu CLI that testenv/bpg/run.sh uses as the
// Terraform-protocol CLI of the bpg acceptance tests when terraform is not
// on PATH. It lives in its own module so that OpenTofu never enters the
// plugin's dependency graph; the replace below is OpenTofu's own (go
// install cannot build a module that has one).
package tools

import _ "github.com/opentofu/opentofu/cmd/tofu"
