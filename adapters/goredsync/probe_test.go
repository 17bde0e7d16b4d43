package goredsync

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

// TestProbeSends checks that the probe makes redsync send every pinned
// script both ways, and SET NX with EX and with PX.
func TestProbeSends(t *testing.T) {
	rec := New().recorder()
	if err := New().probe(probeContext(t), rec); err != nil {
		t.Fatalf("probe() = %v, want nil", err)
	}
	type sent struct {
		name   string
		script script
	}
	count := make(map[sent]int)
	var sets []string
	for _, s := range rec.Seen() {
		name, _ := s.Args[0].(string)
		count[sent{name, s.Script}]++
		if name == "set" {
			opt, _ := s.Args[3].(string)
			sets = append(sets, opt)
		}
	}
	for _, p := range pins {
		for _, name := range []string{"evalsha", "eval"} {
			if count[sent{name, p.Script}] == 0 {
				t.Errorf("the probe sent no %s of the %s script", name, p.Script)
			}
		}
	}
	if got, want := strings.Join(sets, ","), "ex,px"; got != want {
		t.Errorf("the probe's SET expiry options = %s, want %s", got, want)
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
		{deleteSHA1, "release"},
		{touchSHA1, "refresh"},
		{touchWithSetNXSHA1, "refresh (WithSetNXOnExtend)"},
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
		{Use: "refresh", SHA1: touchSHA1},
		{Use: "release", SHA1: deleteSHA1},
		{Use: "refresh (WithSetNXOnExtend)", SHA1: touchWithSetNXSHA1},
	}
	if !equalScripts(changed.Scripts, want) {
		t.Errorf("UpstreamChangedError.Scripts = %v, want %v", changed.Scripts, want)
	}
}

// Pinned scripts the adapter takes for something else are not an upstream
// change of hashes, but the probe must still refuse.
func TestProbeMislabelled(t *testing.T) {
	ps := []pin{
		{SHA1: deleteSHA1, Script: scriptDelete},
		{SHA1: touchSHA1, Script: scriptTouchWithSetNX},
		{SHA1: touchWithSetNXSHA1, Script: scriptTouch},
	}
	err := newAdapter(ps).Probe(probeContext(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() with swapped pins = %v, want a plain error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refresh, ") || !strings.Contains(msg, "refresh (WithSetNXOnExtend)") {
		t.Errorf("Probe().Error() = %q, want it to name both refresh steps", msg)
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
