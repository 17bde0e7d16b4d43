package goredsync

import (
	"errors"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

func TestProbe(t *testing.T) {
	adaptertest.WantProbe(t, New(), &Adapter{})
}

// TestProbeSends checks that the probe makes redsync send every pinned
// script both ways, and SET NX with EX and with PX.
func TestProbeSends(t *testing.T) {
	rec := New().recorder()
	if err := New().probe(adaptertest.Context(t), rec); err != nil {
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
		// Asked before it was sent, each script was what it then was.
		if s.Script != scriptUnknown && s.Act.Op != registry.OpNone && !adapterkit.SameAction(s.Pending, s.Act) {
			t.Errorf("the probe's %s of the %s script: pending %+v, then %+v, want the same", name, s.Script, s.Pending, s.Act)
		}
		if name == "set" && s.Pending.Op != registry.OpNone {
			t.Errorf("the probe's SET: pending %+v, want OpNone", s.Pending)
		}
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
			err := newAdapter(adaptertest.Without(pins, tt.missing)).Probe(adaptertest.Context(t))
			adaptertest.WantUnpinned(t, err, Library, tt.use, tt.missing)
		})
	}
}

func TestProbeNoPins(t *testing.T) {
	err := newAdapter(nil).Probe(adaptertest.Context(t))
	adaptertest.WantNoPins(t, err,
		registry.Script{Use: "refresh", SHA1: touchSHA1},
		registry.Script{Use: "release", SHA1: deleteSHA1},
		registry.Script{Use: "refresh (WithSetNXOnExtend)", SHA1: touchWithSetNXSHA1},
	)
}

// Pinned scripts the adapter takes for something else are not an upstream
// change of hashes, but the probe must still refuse.
func TestProbeMislabelled(t *testing.T) {
	ps := []pin{
		{SHA1: deleteSHA1, Script: scriptDelete},
		{SHA1: touchSHA1, Script: scriptTouchWithSetNX},
		{SHA1: touchWithSetNXSHA1, Script: scriptTouch},
	}
	err := newAdapter(ps).Probe(adaptertest.Context(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() with swapped pins = %v, want a plain error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refresh, ") || !strings.Contains(msg, "refresh (WithSetNXOnExtend)") {
		t.Errorf("Probe().Error() = %q, want it to name both refresh steps", msg)
	}
}

func TestProbeCancelled(t *testing.T) {
	adaptertest.WantProbeCancelled(t, New())
}
