package kube

import "github.com/caddy-proxmox/caddy-proxmox/translate"

// PrivilegeAccess is the Kubernetes permission that stands for a PVE
// privilege in namespace ns ("" for cluster-wide paths): the rule
// translate.PrivilegeRule gives, placed in ns when it is a namespaced one.
// virtAPI tells whether power actions go through virt-api (subresource
// verbs) or patch the VM (the fallback).
func PrivilegeAccess(priv, ns string, virtAPI bool) Access {
	r := translate.PrivilegeRule(priv, virtAPI)
	a := Access{Group: r.Group, Resource: r.Resource, Subresource: r.Subresource, Verb: r.Verb}
	if r.Namespaced {
		a.Namespace = ns
	}
	return a
}
