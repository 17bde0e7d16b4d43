package bsmredislock

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

func TestProbe(t *testing.T) {
	adaptertest.WantProbe(t, New(), &Adapter{})
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
			err := newAdapter(adaptertest.Without(pins, tt.missing)).Probe(adaptertest.Context(t))
			adaptertest.WantUnpinned(t, err, Library, tt.use, tt.missing)
		})
	}
}

func TestProbeNoPins(t *testing.T) {
	err := newAdapter(nil).Probe(adaptertest.Context(t))
	adaptertest.WantNoPins(t, err,
		registry.Script{Use: "obtain", SHA1: obtainSHA1},
		registry.Script{Use: "refresh", SHA1: refreshSHA1},
		registry.Script{Use: "pttl", SHA1: pttlSHA1},
		registry.Script{Use: "release", SHA1: releaseSHA1},
	)
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
	err := newAdapter(ps).Probe(adaptertest.Context(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() with swapped pins = %v, want a plain error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refresh") || !strings.Contains(msg, "release") {
		t.Errorf("Probe().Error() = %q, want it to name the refresh and release steps", msg)
	}
}

func TestProbeCancelled(t *testing.T) {
	adaptertest.WantProbeCancelled(t, New())
}
