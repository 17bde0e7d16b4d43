package adapterkit

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/lockwatch/lockwatch/scripts"
)

// script is a test adapter's script type.
type script uint8

const (
	scriptUnknown script = iota
	scriptLock
	scriptUnlock
)

const (
	lockSource   = `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`
	unlockSource = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`
)

func sha1Hex(src string) string {
	sum := sha1.Sum([]byte(src))
	return hex.EncodeToString(sum[:])
}

var (
	lockSHA1   = sha1Hex(lockSource)
	unlockSHA1 = sha1Hex(unlockSource)
	testPins   = []Pin[script]{
		{SHA1: lockSHA1, Script: scriptLock},
		{SHA1: unlockSHA1, Script: scriptUnlock},
	}
)

func TestScriptSHA1(t *testing.T) {
	tests := []struct {
		name string
		arg  any
		want string // "" when it names no script
	}{
		{"evalsha", lockSHA1, lockSHA1},
		{"evalsha", strings.ToUpper(lockSHA1), lockSHA1},
		{"evalsha", []byte(lockSHA1), lockSHA1},
		{"evalsha", strings.Repeat("0", 40), strings.Repeat("0", 40)},
		{"evalsha", lockSHA1[:39], ""},
		{"evalsha", lockSHA1 + "0", ""},
		{"evalsha", 42, ""},
		{"evalsha", nil, ""},
		{"eval", lockSource, lockSHA1},
		{"eval", []byte(unlockSource), unlockSHA1},
		{"eval", "", sha1Hex("")},
		{"eval", 42, ""},
		{"EVALSHA", lockSHA1, ""}, // names are lower case
		{"set", lockSHA1, ""},
		{"", lockSHA1, ""},
	}
	for _, tt := range tests {
		var buf [2 * sha1.Size]byte
		ok := ScriptSHA1(tt.name, tt.arg, &buf)
		if ok != (tt.want != "") || (ok && string(buf[:]) != tt.want) {
			t.Errorf("ScriptSHA1(%q, %#v) = %q, %v, want %q, %v", tt.name, tt.arg, buf[:], ok, tt.want, tt.want != "")
		}
	}
}

func TestPins(t *testing.T) {
	p := NewPins(testPins)
	tests := []struct {
		name string
		arg  any
		want script
	}{
		{"evalsha", lockSHA1, scriptLock},
		{"evalsha", strings.ToUpper(unlockSHA1), scriptUnlock},
		{"evalsha", unlockSHA1[:20] + strings.ToUpper(unlockSHA1[20:]), scriptUnlock},
		{"evalsha", []byte(unlockSHA1), scriptUnlock},
		{"eval", lockSource, scriptLock},
		{"eval", []byte(unlockSource), scriptUnlock},
		{"evalsha", strings.Repeat("0", 40), scriptUnknown},
		{"evalsha", lockSource, scriptUnknown},
		{"eval", lockSHA1, scriptUnknown},
		{"eval", "return 1", scriptUnknown},
		{"evalsha", 42, scriptUnknown},
		{"get", lockSHA1, scriptUnknown},
	}
	for _, tt := range tests {
		if got := p.Script(tt.name, tt.arg); got != tt.want {
			t.Errorf("Pins.Script(%q, %#v) = %v, want %v", tt.name, tt.arg, got, tt.want)
		}
	}
	if got := p.Lookup(unlockSHA1); got != scriptUnlock {
		t.Errorf("Pins.Lookup(unlock) = %v, want %v", got, scriptUnlock)
	}
	if got := p.Lookup(strings.ToUpper(unlockSHA1)); got != scriptUnknown {
		t.Errorf("Pins.Lookup(upper-case unlock) = %v, want %v: the table is by lower-case SHA1", got, scriptUnknown)
	}
}

func TestPinsOr(t *testing.T) {
	def := NewPins(testPins)
	var zero Pins[script]
	if got := zero.Or(def).Lookup(lockSHA1); got != scriptLock {
		t.Errorf("nil Pins.Or(default).Lookup(lock) = %v, want %v", got, scriptLock)
	}
	none := NewPins[script](nil)
	if none == nil {
		t.Fatalf("NewPins(nil) = nil, want an empty table")
	}
	if got := none.Or(def).Lookup(lockSHA1); got != scriptUnknown {
		t.Errorf("NewPins(nil).Or(default).Lookup(lock) = %v, want %v: no pins is not the default", got, scriptUnknown)
	}
	only := NewPins(testPins[1:])
	if got := only.Or(def).Lookup(lockSHA1); got != scriptUnknown {
		t.Errorf("NewPins(unlock only).Or(default).Lookup(lock) = %v, want %v", got, scriptUnknown)
	}
}

func TestPinsScriptAllocs(t *testing.T) {
	p := NewPins(testPins)
	args := []any{lockSHA1, strings.ToUpper(lockSHA1), strings.Repeat("0", 40), "short"}
	n := testing.AllocsPerRun(100, func() {
		for _, a := range args {
			p.Script("evalsha", a)
		}
	})
	if n != 0 {
		t.Errorf("Pins.Script(evalsha, string) allocates %v times, want 0", n)
	}
}

func TestPinsOf(t *testing.T) {
	names := map[string]script{"delete": scriptUnlock, "touch": scriptLock, "touchWithSetNX": scriptLock}
	ps := PinsOf(scripts.Redsync, func(p scripts.Pin) (script, bool) {
		s, ok := names[p.Script]
		return s, ok
	})
	want := scripts.PinsOf(scripts.Redsync)
	if len(ps) != len(want) {
		t.Fatalf("PinsOf(Redsync) = %d pins, want %d", len(ps), len(want))
	}
	for i, p := range ps {
		if p.SHA1 != want[i].SHA1 || p.Script != names[want[i].Script] || p.Releases != "v4.12.1 to v4.18.1" {
			t.Errorf("PinsOf(Redsync)[%d] = %+v, want the table's %+v, releases v4.12.1 to v4.18.1", i, p, want[i])
		}
	}
	if got := PinsOf(scripts.Redislock, func(scripts.Pin) (script, bool) { return scriptLock, true }); len(got) == 0 || got[0].Releases != "v0.9.4" {
		t.Errorf("PinsOf(Redislock) = %+v, want its first pin labelled v0.9.4", got)
	}
	defer func() {
		if recover() == nil {
			t.Error("PinsOf with a script the adapter does not know did not panic")
		}
	}()
	PinsOf(scripts.Redsync, func(p scripts.Pin) (script, bool) { return scriptLock, p.Script != "touch" })
}
