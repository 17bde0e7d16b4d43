package adapterkit

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
)

// command builds a command as the registry hook hands it over.
func command(name string, reply any, err error, args ...any) registry.Command {
	return registry.Command{Name: name, Args: append([]any{name}, args...), Reply: reply, Err: err}
}

func TestPinsCall(t *testing.T) {
	p := NewPins(testPins)
	type result struct {
		s          script
		key, value string
		ok         bool
	}
	lock := result{scriptLock, "job:1", "v1", true}
	tests := []struct {
		name string
		cmd  registry.Command
		want result
	}{
		{"evalsha", command("evalsha", nil, nil, lockSHA1, 1, "job:1", "v1", 8000), lock},
		{"eval", command("eval", nil, nil, lockSource, 1, "job:1", "v1"), lock},
		{"upper-case sha", command("evalsha", nil, nil, strings.ToUpper(lockSHA1), 1, "job:1", "v1"), lock},
		{"[]byte args", command("evalsha", nil, nil, []byte(lockSHA1), "1", []byte("job:1"), []byte("v1")), lock},
		{"uint numkeys", command("evalsha", nil, nil, lockSHA1, uint8(1), "job:1", "v1"), lock},
		{"error and reply", command("evalsha", int64(7), errors.New("i/o timeout"), lockSHA1, 1, "job:1", "v1"), lock},
		{"other script", command("evalsha", nil, nil, unlockSHA1, 1, "job:1", "v1"), result{scriptUnlock, "job:1", "v1", true}},
		{"empty key and value", command("evalsha", nil, nil, lockSHA1, 1, "", ""), result{scriptLock, "", "", true}},
		{"unknown sha", command("evalsha", nil, nil, strings.Repeat("0", 40), 1, "job:1", "v1"), result{}},
		{"eval of the sha", command("eval", nil, nil, lockSHA1, 1, "job:1", "v1"), result{}},
		{"not a script", command("set", nil, nil, lockSHA1, 1, "job:1", "v1"), result{}},
		{"no value", command("evalsha", nil, nil, lockSHA1, 1, "job:1"), result{}},
		{"two keys", command("evalsha", nil, nil, lockSHA1, 2, "job:1", "v1"), result{}},
		{"no keys", command("evalsha", nil, nil, lockSHA1, 0, "job:1", "v1"), result{}},
		{"numkeys not a number", command("evalsha", nil, nil, lockSHA1, "one", "job:1", "v1"), result{}},
		{"int key", command("evalsha", nil, nil, lockSHA1, 1, 42, "v1"), result{}},
		{"nil value", command("evalsha", nil, nil, lockSHA1, 1, "job:1", nil), result{}},
		{"no args", registry.Command{Name: "evalsha"}, result{}},
	}
	for _, tt := range tests {
		var got result
		got.s, got.key, got.value, got.ok = p.Call(tt.cmd)
		if got != tt.want {
			t.Errorf("Pins.Call(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestRefresh(t *testing.T) {
	errIO := errors.New("i/o timeout")
	none := registry.Action{}
	refresh := func(ttl time.Duration) registry.Action {
		return registry.Action{Op: registry.OpRefresh, Key: "job:1", Value: "v1", TTL: ttl}
	}
	notHeld := registry.Action{Op: registry.OpNotHeld, Key: "job:1", Value: "v1"}
	release := registry.Action{Op: registry.OpRelease, Key: "job:1", Value: "v1"}
	tests := []struct {
		name string
		cmd  registry.Command
		want registry.Action
	}{
		{"refresh", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000), refresh(8 * time.Second)},
		{"string expiry", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "2500"), refresh(2500 * time.Millisecond)},
		{"not held", command("evalsha", int64(0), nil, lockSHA1, 1, "job:1", "v1", 8000), notHeld},
		{"to zero deletes", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 0), release},
		{"to negative deletes", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "-10"), release},
		{"to zero, not held", command("evalsha", int64(0), nil, lockSHA1, 1, "job:1", "v1", 0), notHeld},
		{"error", command("evalsha", nil, errIO, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"error with a reply", command("evalsha", int64(1), errIO, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"odd reply", command("evalsha", int64(2), nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"string reply", command("evalsha", "1", nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"nil reply", command("evalsha", nil, nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"expiry not a number", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "8s"), none},
		{"float expiry", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000.0), none},
		{"expiry overflows", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", int64(math.MaxInt64)), none},
		{"without expiry", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1"), none},
		{"extra arg", command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000, "x"), none},
	}
	for _, tt := range tests {
		if got := Refresh(tt.cmd, "job:1", "v1"); !SameAction(got, tt.want) {
			t.Errorf("Refresh(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestRelease(t *testing.T) {
	release := registry.Action{Op: registry.OpRelease, Key: "job:1", Value: "v1"}
	tests := []struct {
		name string
		cmd  registry.Command
		want registry.Action
	}{
		{"released", command("evalsha", int64(1), nil, unlockSHA1, 1, "job:1", "v1"), release},
		{"not held", command("evalsha", int64(0), nil, unlockSHA1, 1, "job:1", "v1"), release},
		{"error", command("evalsha", nil, errors.New("i/o timeout"), unlockSHA1, 1, "job:1", "v1"), release},
		{"extra arg", command("evalsha", int64(1), nil, unlockSHA1, 1, "job:1", "v1", 8000), registry.Action{}},
	}
	for _, tt := range tests {
		if got := Release(tt.cmd, "job:1", "v1"); !SameAction(got, tt.want) {
			t.Errorf("Release(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestClassifyHelpersAllocs(t *testing.T) {
	p := NewPins(testPins)
	c := command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "8000")
	n := testing.AllocsPerRun(100, func() {
		if _, key, value, ok := p.Call(c); ok {
			Refresh(c, key, value)
			Release(c, key, value)
		}
	})
	if n != 0 {
		t.Errorf("Pins.Call, Refresh and Release of an EVALSHA allocate %v times, want 0", n)
	}
}
