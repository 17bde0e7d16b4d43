package bsmredislock

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/adapters/internal/adapterkit"
	"github.com/lockwatch/lockwatch/adapters/internal/adaptertest"
	"github.com/lockwatch/lockwatch/registry"
)

// A redislock release without ObtainMulti is v0.9.4: this is how the probe
// and the tests tell which release is linked.
func TestLinked(t *testing.T) {
	v := adapterkit.Version(Library) // "(unknown)" in test binaries
	t.Logf("linked redislock: %v scripts (build info: %s)", linked(), v)
	if strings.HasPrefix(v, "v0.9.") && linked() != v094 || strings.HasPrefix(v, "v0.10.") && linked() != v010 {
		t.Errorf("linked() = %v, want the release of redislock %s", linked(), v)
	}
}

func TestProbe(t *testing.T) {
	adaptertest.WantProbe(t, New(), &Adapter{})
}

// An adapter that knows only the other release's scripts refuses the
// linked one, naming its scripts.
func TestProbeOtherRelease(t *testing.T) {
	other := v010
	if linked() == v010 {
		other = v094
	}
	err := newAdapter(pinsOf(other)).Probe(adaptertest.Context(t))
	var want []registry.Script
	for _, p := range pinsOf(linked()) {
		want = append(want, registry.Script{Use: p.Script.kind.String(), SHA1: p.SHA1})
	}
	// In the order sent: obtain, refresh, pttl, release.
	want[2], want[3] = want[3], want[2]
	adaptertest.WantNoPins(t, err, want...)
}

// TestProbeSends checks that the probe makes the linked redislock send every
// script of its release both ways, and what the adapter made of them,
// pending and answered.
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
	for _, s := range rec.Seen() {
		name, _ := s.Args[0].(string)
		count[sent{name, s.Script}]++
		if s.Script.release != linked() {
			t.Errorf("the probe's step %s sent %s of a %v script, want %v's", s.Step, name, s.Script.release, linked())
		}
		if name == "eval" && s.Script.kind != kindPTTL && !adapterkit.SameAction(s.Pending, s.Act) {
			t.Errorf("the probe's step %s: %s pending %+v, answered %+v, want the same", s.Step, name, s.Pending, s.Act)
		}
	}
	for _, p := range pinsOf(linked()) {
		for _, name := range []string{"evalsha", "eval"} {
			if count[sent{name, p.Script}] == 0 {
				t.Errorf("the probe sent no %s of the %v %v script", name, p.Releases, p.Script.kind)
			}
		}
	}
}

// With ObtainMulti (v0.10.0), the probe also locks several keys, and checks
// that the adapter tracks them all.
func TestProbeMulti(t *testing.T) {
	if linked() != v010 {
		t.Skipf("linked redislock %v has no ObtainMulti", linked())
	}
	rec := New().recorder()
	if err := New().probe(adaptertest.Context(t), rec); err != nil {
		t.Fatalf("probe() = %v, want nil", err)
	}
	got := make(map[string]registry.Op)
	for _, s := range rec.Seen() {
		if name, _ := s.Args[0].(string); name != "eval" {
			continue
		}
		if !strings.Contains(s.Step, "(") {
			if s.Act.Keys != nil {
				t.Errorf("the probe's step %s over one key: Keys = %v, want nil", s.Step, s.Act.Keys)
			}
			continue
		}
		got[s.Step] = s.Act.Op
		if s.Script.kind != kindPTTL && !slices.Equal(s.Act.Keys, probeKeys) {
			t.Errorf("the probe's step %s: Keys = %v, want %v", s.Step, s.Act.Keys, probeKeys)
		}
	}
	want := map[string]registry.Op{stepObtainMulti: registry.OpObtain, stepRefreshMulti: registry.OpRefresh,
		stepPTTLMulti: registry.OpNone, stepReleaseMulti: registry.OpRelease}
	for step, op := range want {
		if g, ok := got[step]; !ok || g != op {
			t.Errorf("the probe's step %s: EVAL classified %v (sent: %v), want %v", step, g, ok, op)
		}
	}

	// An adapter that loses the keys of a lock over several keys fails the
	// probe's steps over several keys.
	a := New()
	rec = a.recorder()
	rec.Classify = func(c registry.Command) registry.Action {
		act := a.Classify(c)
		act.Keys = nil
		return act
	}
	err := a.probe(adaptertest.Context(t), rec)
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("probe() of an adapter without Keys = %v, want a plain error", err)
	}
	for _, step := range []string{stepObtainMulti, stepRefreshMulti, stepReleaseMulti} {
		if !strings.Contains(err.Error(), step) {
			t.Errorf("probe() of an adapter without Keys = %q, want it to name %s", err, step)
		}
	}
}

// An adapter that answers otherwise before a command is sent fails the
// probe.
func TestProbePending(t *testing.T) {
	a := New()
	rec := a.recorder()
	rec.Classify = func(c registry.Command) registry.Action {
		if c.Pending {
			return registry.Action{}
		}
		return a.Classify(c)
	}
	err := a.probe(adaptertest.Context(t), rec)
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) || !strings.Contains(err.Error(), "obtain, obtain, refresh, release") {
		t.Errorf("probe() of an adapter without pending answers = %v, want a plain error naming the obtain, refresh and release steps", err)
	}
}

func TestProbeUnpinned(t *testing.T) {
	for _, p := range pinsOf(linked()) {
		t.Run(p.Script.kind.String(), func(t *testing.T) {
			err := newAdapter(adaptertest.Without(pins, p.SHA1)).Probe(adaptertest.Context(t))
			adaptertest.WantUnpinned(t, err, Library, p.Script.kind.String(), p.SHA1)
		})
	}
	// The other release's pins are not needed.
	other := v010
	if linked() == v010 {
		other = v094
	}
	for _, p := range pinsOf(other) {
		if err := newAdapter(adaptertest.Without(pins, p.SHA1)).Probe(adaptertest.Context(t)); err != nil {
			t.Errorf("Probe() without the %v %v pin = %v, want nil with %v linked", p.Releases, p.Script.kind, err, linked())
		}
	}
}

func TestProbeNoPins(t *testing.T) {
	err := newAdapter(nil).Probe(adaptertest.Context(t))
	sha := func(k kind) string {
		for _, p := range pinsOf(linked()) {
			if p.Script.kind == k {
				return p.SHA1
			}
		}
		return ""
	}
	adaptertest.WantNoPins(t, err,
		registry.Script{Use: "obtain", SHA1: sha(kindObtain)},
		registry.Script{Use: "refresh", SHA1: sha(kindRefresh)},
		registry.Script{Use: "pttl", SHA1: sha(kindPTTL)},
		registry.Script{Use: "release", SHA1: sha(kindRelease)},
	)
}

// A pinned script used for something else than the adapter thinks is not an
// upstream change of hashes, but the probe must still refuse.
func TestProbeMislabelled(t *testing.T) {
	var ps []pin
	for _, p := range pins {
		switch p.Script.kind {
		case kindRefresh:
			p.Script.kind = kindRelease
		case kindRelease:
			p.Script.kind = kindRefresh
		}
		ps = append(ps, p)
	}
	err := newAdapter(ps).Probe(adaptertest.Context(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) {
		t.Fatalf("Probe() with swapped pins = %v, want a plain error", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "refresh") || !strings.Contains(msg, "release") {
		t.Errorf("Probe().Error() = %q, want it to name the refresh and release steps", msg)
	}
}

// A script pinned under the other release (say, the adapter takes a v0.10.0
// script for v0.9.4's) is refused too: the releases answer differently.
func TestProbeWrongRelease(t *testing.T) {
	var ps []pin
	for _, p := range pins {
		if p.Script.release == linked() && p.Script.kind == kindRefresh {
			p.Script.release = v094 + v010 - linked()
		}
		ps = append(ps, p)
	}
	err := newAdapter(ps).Probe(adaptertest.Context(t))
	if err == nil || errors.Is(err, registry.ErrUpstreamChanged) || !strings.Contains(err.Error(), "refresh") {
		t.Errorf("Probe() with the refresh script pinned under the other release = %v, want a plain error naming refresh", err)
	}
}

func TestProbeCancelled(t *testing.T) {
	adaptertest.WantProbeCancelled(t, New())
}
