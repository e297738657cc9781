package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// consoleClaimLabel marks the ConfigMaps recording used console tickets.
	consoleClaimLabel  = "pve.caddy-proxmox.io/console-claim"
	consoleClaimPrefix = "pve-console-claim-"
	// consoleClaimGCInterval bounds how often a replica sweeps expired claims.
	consoleClaimGCInterval = time.Minute
)

// TicketClaims records single-use tickets as used. Claim reports whether
// this call was the first use of ticket; the record is kept at least until
// expires, after which the ticket is invalid anyway and the record may go.
type TicketClaims interface {
	Claim(ctx context.Context, ticket string, expires time.Time) (first bool, err error)
}

// TicketKey is the name a ticket is known by in the cluster: a hash, so
// that no record or label carries a usable ticket. It is a valid object
// name suffix and label value.
func TicketKey(ticket string) string {
	sum := sha256.Sum256([]byte(ticket))
	return hex.EncodeToString(sum[:20])
}

// ConsoleClaims keeps used console tickets as ConfigMaps in the task
// namespace, named from the ticket's hash, so that every replica behind a
// Service agrees: creating the record is the claim, and AlreadyExists means
// another request, on any replica, used the ticket first. Expired records
// are swept by whichever replica claims next, at most once a minute.
type ConsoleClaims struct {
	kube   kubernetes.Interface
	ns     string
	logger *zap.Logger

	mu     sync.Mutex
	lastGC time.Time
	gcBusy bool
	now    func() time.Time
}

// NewConsoleClaims keeps claims in namespace ns.
func NewConsoleClaims(kube kubernetes.Interface, ns string, logger *zap.Logger) *ConsoleClaims {
	if logger == nil {
		logger = zap.NewNop()
	}
	return &ConsoleClaims{kube: kube, ns: ns, logger: logger, now: time.Now}
}

// Interface guard.
var _ TicketClaims = (*ConsoleClaims)(nil)

// Claim records ticket as used until expires.
func (cc *ConsoleClaims) Claim(ctx context.Context, ticket string, expires time.Time) (bool, error) {
	cc.maybeCollect()
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name:      consoleClaimPrefix + TicketKey(ticket),
			Namespace: cc.ns,
			Labels:    map[string]string{consoleClaimLabel: "true"},
		},
		Data: map[string]string{"expires": expires.UTC().Format(time.RFC3339)},
	}
	_, err := cc.kube.CoreV1().ConfigMaps(cc.ns).Create(ctx, cm, metav1.CreateOptions{})
	switch {
	case err == nil:
		return true, nil
	case apierrors.IsAlreadyExists(err):
		return false, nil
	default:
		return false, fmt.Errorf("recording the console ticket as used: %w", err)
	}
}

// maybeCollect starts a sweep of expired claims when none ran recently.
func (cc *ConsoleClaims) maybeCollect() {
	cc.mu.Lock()
	now := cc.now()
	if cc.gcBusy || now.Sub(cc.lastGC) < consoleClaimGCInterval {
		cc.mu.Unlock()
		return
	}
	cc.gcBusy, cc.lastGC = true, now
	cc.mu.Unlock()
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		n, err := cc.Collect(ctx)
		if err != nil {
			cc.logger.Debug("sweeping console ticket claims", zap.Int("deleted", n), zap.Error(err))
		}
		cc.mu.Lock()
		cc.gcBusy = false
		cc.mu.Unlock()
	}()
}

// Collect deletes the claims whose expiry has passed and returns how many
// it deleted. Records without a readable expiry are deleted as well: they
// cannot guard anything.
func (cc *ConsoleClaims) Collect(ctx context.Context) (int, error) {
	list, err := cc.kube.CoreV1().ConfigMaps(cc.ns).List(ctx, metav1.ListOptions{LabelSelector: consoleClaimLabel + "=true"})
	if err != nil {
		return 0, fmt.Errorf("listing console ticket claims: %w", err)
	}
	now := cc.now()
	deleted := 0
	var firstErr error
	for i := range list.Items {
		cm := &list.Items[i]
		exp, perr := time.Parse(time.RFC3339, cm.Data["expires"])
		if perr == nil && !now.After(exp) {
			continue
		}
		// Delete exactly the version looked at.
		pre := metav1.Preconditions{UID: &cm.UID, ResourceVersion: &cm.ResourceVersion}
		err := cc.kube.CoreV1().ConfigMaps(cc.ns).Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &pre})
		switch {
		case err == nil:
			deleted++
		case apierrors.IsNotFound(err) || apierrors.IsConflict(err):
		case firstErr == nil:
			firstErr = fmt.Errorf("deleting console ticket claim %s: %w", cm.Name, err)
		}
	}
	return deleted, firstErr
}
