package kube

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

func TestConsoleClaims(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	a := NewConsoleClaims(kube, "tasks", nil)
	b := NewConsoleClaims(kube, "tasks", nil) // another replica
	for _, cc := range []*ConsoleClaims{a, b} {
		cc.now = func() time.Time { return now }
		cc.lastGC = now.Add(24 * time.Hour) // no background sweeps: this test sweeps itself
	}
	const ticket = "PVEVNC:6632A1B0::c2lnbmF0dXJl"
	if first, err := a.Claim(ctx, ticket, now.Add(2*time.Minute)); err != nil || !first {
		t.Fatalf("first claim: %v %v", first, err)
	}
	if first, err := b.Claim(ctx, ticket, now.Add(2*time.Minute)); err != nil || first {
		t.Fatalf("second claim on the other replica: %v %v", first, err)
	}
	if first, err := a.Claim(ctx, ticket, now.Add(2*time.Minute)); err != nil || first {
		t.Fatalf("second claim on the same replica: %v %v", first, err)
	}
	if first, err := b.Claim(ctx, "PVEVNC:6632A1B0::b3RoZXI=", now.Add(time.Minute)); err != nil || !first {
		t.Fatalf("another ticket: %v %v", first, err)
	}
	list, err := kube.CoreV1().ConfigMaps("tasks").List(ctx, metav1.ListOptions{LabelSelector: consoleClaimLabel + "=true"})
	if err != nil || len(list.Items) != 2 {
		t.Fatalf("claims recorded: %v %v", list, err)
	}
	for _, cm := range list.Items {
		if strings.Contains(cm.Name, "c2lnbmF0dXJl") || strings.Contains(cm.Data["expires"], "PVEVNC") || len(cm.Data) != 1 {
			t.Fatalf("claim %s carries more than a hash and an expiry: %v", cm.Name, cm.Data)
		}
	}

	// Sweeping: only claims past their expiry go; a claim that survives
	// still refuses its ticket.
	now = now.Add(90 * time.Second)
	if n, err := a.Collect(ctx); err != nil || n != 1 {
		t.Fatalf("Collect after 90 s: %d, %v", n, err)
	}
	if first, err := b.Claim(ctx, ticket, now.Add(2*time.Minute)); err != nil || first {
		t.Fatalf("claim after the sweep: %v %v", first, err)
	}
	now = now.Add(time.Hour)
	if n, err := b.Collect(ctx); err != nil || n != 1 {
		t.Fatalf("Collect after an hour: %d, %v", n, err)
	}
	if list, _ := kube.CoreV1().ConfigMaps("tasks").List(ctx, metav1.ListOptions{}); len(list.Items) != 0 {
		t.Fatalf("left after sweeping: %v", list.Items)
	}
	// The other objects in the namespace are not the sweeper's business.
	if _, err := a.Collect(ctx); err != nil {
		t.Fatal(err)
	}
}

// A claim sweeps expired claims in the background, at most once a minute.
func TestConsoleClaimsSweepOnClaim(t *testing.T) {
	ctx := context.Background()
	kube := fake.NewClientset()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	cc := NewConsoleClaims(kube, "tasks", nil)
	cc.now = func() time.Time { return now }
	if _, err := cc.Claim(ctx, "old", now.Add(time.Second)); err != nil {
		t.Fatal(err)
	}
	now = now.Add(2 * time.Minute)
	if _, err := cc.Claim(ctx, "new", now.Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the expired claim to be swept", func() (bool, string) {
		list, err := kube.CoreV1().ConfigMaps("tasks").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		var names []string
		for _, cm := range list.Items {
			names = append(names, cm.Name)
		}
		return len(list.Items) == 1 && list.Items[0].Name == consoleClaimPrefix+TicketKey("new"), strings.Join(names, ",")
	})
	eventually(t, "the sweep to finish", func() (bool, string) {
		cc.mu.Lock()
		defer cc.mu.Unlock()
		return !cc.gcBusy, "busy"
	})
}
