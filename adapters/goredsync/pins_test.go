package goredsync

import (
	"fmt"
	"slices"
	"testing"

	"github.com/lockwatch/lockwatch/scripts"
)

// The SHA1s of redsync's scripts, as package scripts pins them.
var (
	deleteSHA1         = pinned(scriptDelete)
	touchSHA1          = pinned(scriptTouch)
	touchWithSetNXSHA1 = pinned(scriptTouchWithSetNX)
)

// pinned returns the SHA1 of script s.
func pinned(s script) string {
	for _, p := range pins {
		if p.Script == s {
			return p.SHA1
		}
	}
	panic(fmt.Sprintf("no %v script is pinned", s))
}

func TestPins(t *testing.T) {
	want := []script{scriptDelete, scriptTouch, scriptTouchWithSetNX}
	var got []script
	for _, p := range pins {
		got = append(got, p.Script)
		if p.Releases != "v4.12.1 to v4.18.1" {
			t.Errorf("pin %s (%v) is labelled %q, want %q", p.SHA1, p.Script, p.Releases, "v4.12.1 to v4.18.1")
		}
	}
	if !slices.Equal(got, want) {
		t.Errorf("pins = scripts %v, want %v (the fuzz seed corpus names pins by index)", got, want)
	}
	if r, all := Releases(), scripts.Releases(scripts.Redsync); len(r) != 2 || r[0] != all[0] || r[1] != all[len(all)-1] {
		t.Errorf("Releases() = %v, want the oldest and the newest of %v", r, all)
	}
}
