package bsmredislock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

func probeContext(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestProbe(t *testing.T) {
	ctx := probeContext(t)
	if err := New().Probe(ctx); err != nil {
		t.Errorf("New().Probe() = %v, want nil", err)
	}
	var zero Adapter
	if err := zero.Probe(ctx); err != nil {
		t.Errorf("Adapter{}.Probe() = %v, want nil", err)
	}
}

// without returns the default pins minus the one with the given SHA1.
func without(sha string) []pin {
	var out []pin
	for _, p := range pins {
		if p.SHA1 != sha {
			out = append(out, p)
		}
	}
	return out
}

func TestProbeUnpinned(t *testing.T) {
	tests := []struct {
		missing string
		use     string
	}{
		{obtainSHA1, "obtain"},
		{refreshSHA1, "refresh"},
		{releaseSHA1, "release"},
		{pttlSHA1, "pttl"},
	}
	for _, tt := range tests {
		t.Run(tt.use, func(t *testing.T) {
			err := newAdapter(without(tt.missing)).Probe(probeContext(t))
			if !errors.Is(err, registry.ErrUpstreamChanged) {
				t.Fatalf("Probe() without the %s pin = %v, want an error wrapping ErrUpstreamChanged", tt.use, err)
			}
			var changed *registry.UpstreamChangedError
			if !errors.As(err, &changed) {
				t.Fatalf("Probe() without the %s pin = %T, want *registry.UpstreamChangedError", tt.use, err)
			}
			if changed.Library != Library {
				t.Errorf("UpstreamChangedError.Library = %q, want %q", changed.Library, Library)
			}
			if changed.Version == "" {
				t.Errorf("UpstreamChangedError.Version = %q, want a version or (unknown)", changed.Version)
			}
			want := []registry.Script{{Use: tt.use, SHA1: tt.missing}}
			if !equalScripts(changed.Scripts, want) {
				t.Errorf("UpstreamChangedError.Scripts = %v, want %v", changed.Scripts, want)
			}
			if msg := err.Error(); !strings.Contains(msg, Library) || !strings.Contains(msg, tt.missing) {
				t.Errorf("Probe().Error() = %q, want it to name %s and %s", msg, Library, tt.missing)
			}
		})
	}
}

func TestProbeNoPins(t *testing.T) {
	err := newAdapter(nil).Probe(probeContext(t))
	var changed *registry.UpstreamChangedError
	if !errors.As(err, &changed) {
		t.Fatalf("Probe() with no pins = %v, want *registry.UpstreamChangedError", err)
	}
	want := []registry.Script{
		{Use: "obtain", SHA1: obtainSHA1},
		{Use: "refresh", SHA1: refreshSHA1},
		{Use: "pttl", SHA1: pttlSHA1},
		{Use: "release", SHA1: releaseSHA1},
	}
	if !equalScripts(changed.Scripts, want) {
		t.Errorf("UpstreamChangedError.Scripts = %v, want %v", changed.Scripts, want)
	}
}

// A pinned script used for something else than the adapter thinks is not an
// upstream change of hashes, but the probe must still refuse.
func TestProbeMislabelled(t *testing.T) {
	ps := []pin{
		{SHA1: obtainSHA1, Script: scriptObtain},
		{SHA1: refreshSHA1, Script: scriptRelease},
		{SHA1: releaseSHA1, Script: scriptRefresh},
		{SHA1: pttlSHA1, Script: scriptPTTL},
	}
	err := newAdapter(ps).Probe(probeContext(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() with swapped pins = %v, want a plain error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refresh") || !strings.Contains(msg, "release") {
		t.Errorf("Probe().Error() = %q, want it to name the refresh and release steps", msg)
	}
}

func TestProbeCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := New().Probe(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Probe(cancelled) = %v, want context.Canceled", err)
	}
}

func equalScripts(a, b []registry.Script) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
