package adapterkit

import (
	"errors"
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
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
		keys       []string
		numKeys    int
		args       []any
		ok         bool
	}
	lock := func(args ...any) result { return result{scriptLock, "job:1", "v1", nil, 1, args, true} }
	tests := []struct {
		name string
		cmd  registry.Command
		want result
	}{
		{"evalsha", command("evalsha", nil, nil, lockSHA1, 1, "job:1", "v1", 8000), lock(8000)},
		{"eval", command("eval", nil, nil, lockSource, 1, "job:1", "v1"), lock()},
		{"upper-case sha", command("evalsha", nil, nil, strings.ToUpper(lockSHA1), 1, "job:1", "v1"), lock()},
		{"[]byte args", command("evalsha", nil, nil, []byte(lockSHA1), "1", []byte("job:1"), []byte("v1")), lock()},
		{"uint numkeys", command("evalsha", nil, nil, lockSHA1, uint8(1), "job:1", "v1"), lock()},
		{"error and reply", command("evalsha", int64(7), errors.New("i/o timeout"), lockSHA1, 1, "job:1", "v1"), lock()},
		{"pending", registry.Command{Name: "evalsha", Args: []any{"evalsha", lockSHA1, 1, "job:1", "v1"}, Pending: true}, lock()},
		{"other script", command("evalsha", nil, nil, unlockSHA1, 1, "job:1", "v1"), result{scriptUnlock, "job:1", "v1", nil, 1, nil, true}},
		{"empty key and value", command("evalsha", nil, nil, lockSHA1, 1, "", ""), result{scriptLock, "", "", nil, 1, nil, true}},
		{"two keys", command("evalsha", nil, nil, lockSHA1, 2, "job:1", "job:2", "v1", "3", 8000),
			result{scriptLock, "job:1", "v1", []string{"job:1", "job:2"}, 2, []any{"3", 8000}, true}},
		{"three keys, mixed types", command("eval", nil, nil, lockSource, int64(3), "job:1", []byte("job:2"), "job:1", []byte("v1")),
			result{scriptLock, "job:1", "v1", []string{"job:1", "job:2", "job:1"}, 3, nil, true}},
		{"two keys, only the value after them", command("evalsha", nil, nil, lockSHA1, "2", "job:1", "job:2", "v1"),
			result{scriptLock, "job:1", "v1", []string{"job:1", "job:2"}, 2, nil, true}},
		{"unknown sha", command("evalsha", nil, nil, strings.Repeat("0", 40), 1, "job:1", "v1"), result{}},
		{"eval of the sha", command("eval", nil, nil, lockSHA1, 1, "job:1", "v1"), result{}},
		{"not a script", command("set", nil, nil, lockSHA1, 1, "job:1", "v1"), result{}},
		{"no value", command("evalsha", nil, nil, lockSHA1, 1, "job:1"), result{}},
		{"two keys, no value", command("evalsha", nil, nil, lockSHA1, 2, "job:1", "v1"), result{}},
		{"no keys", command("evalsha", nil, nil, lockSHA1, 0, "job:1", "v1"), result{}},
		{"negative numkeys", command("evalsha", nil, nil, lockSHA1, -1, "job:1", "v1"), result{}},
		{"huge numkeys", command("evalsha", nil, nil, lockSHA1, int64(1)<<40, "job:1", "v1"), result{}},
		{"numkeys not a number", command("evalsha", nil, nil, lockSHA1, "one", "job:1", "v1"), result{}},
		{"int key", command("evalsha", nil, nil, lockSHA1, 1, 42, "v1"), result{}},
		{"nil second key", command("evalsha", nil, nil, lockSHA1, 2, "job:1", nil, "v1"), result{}},
		{"nil value", command("evalsha", nil, nil, lockSHA1, 1, "job:1", nil), result{}},
		{"no args", registry.Command{Name: "evalsha"}, result{}},
	}
	for _, tt := range tests {
		call, ok := p.Call(tt.cmd.Name, tt.cmd.Args)
		got := result{call.Script, call.Key, call.Value, call.Keys(), call.NumKeys(), call.Args, ok}
		if len(got.args) == 0 {
			got.args = nil // none after the value: an empty subslice of the arguments
		}
		if !reflect.DeepEqual(got, tt.want) {
			t.Errorf("Pins.Call(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestCallKeys(t *testing.T) {
	p := NewPins(testPins)
	args := []any{"evalsha", lockSHA1, 2, "job:1", "job:2", "v1"}
	call, ok := p.Call("evalsha", args)
	if !ok {
		t.Fatalf("Pins.Call(%v) not ok", args)
	}
	first, second := call.Keys(), call.Keys()
	if &first[0] == &second[0] {
		t.Errorf("Call.Keys() returned the same slice twice, want a fresh one each time")
	}
	first[0] = "changed"
	if args[3] != "job:1" || call.Keys()[0] != "job:1" {
		t.Errorf("changing what Call.Keys() returned changed the command or the call")
	}
	want := registry.Action{Op: registry.OpObtain, Key: "job:1", Keys: []string{"job:1", "job:2"}, Value: "v1", TTL: time.Second}
	if got := call.Action(registry.OpObtain, time.Second); !SameAction(got, want) {
		t.Errorf("Call.Action(obtain, 1s) = %+v, want %+v", got, want)
	}
}

// call reads c with the test pins, failing t when it cannot.
func call(t *testing.T, c registry.Command) *Call[script] {
	t.Helper()
	got, ok := NewPins(testPins).Call(c.Name, c.Args)
	if !ok {
		t.Fatalf("Pins.Call(%v) not ok", c.Args)
	}
	return &got
}

func TestOutcome(t *testing.T) {
	errIO := errors.New("i/o timeout")
	tests := []struct {
		r     Replies
		reply any
		err   error
		want  Outcome
	}{
		{IntReplies, int64(1), nil, OutcomeDone},
		{IntReplies, int64(0), nil, OutcomeNotHeld},
		{IntReplies, int64(-1), nil, OutcomeUnknown},
		{IntReplies, int64(2), nil, OutcomeUnknown},
		{IntReplies, "OK", nil, OutcomeUnknown},
		{IntReplies, "1", nil, OutcomeUnknown},
		{IntReplies, 1, nil, OutcomeUnknown},
		{IntReplies, nil, nil, OutcomeUnknown},
		{IntReplies, nil, redis.Nil, OutcomeUnknown},
		{IntReplies, int64(1), errIO, OutcomeUnknown},
		{StatusReplies, "OK", nil, OutcomeDone},
		{StatusReplies, nil, redis.Nil, OutcomeNotHeld},
		{StatusReplies, "OK", redis.Nil, OutcomeNotHeld},
		{StatusReplies, nil, fmt.Errorf("wrapped: %w", redis.Nil), OutcomeNotHeld},
		{StatusReplies, "ok", nil, OutcomeUnknown},
		{StatusReplies, []byte("OK"), nil, OutcomeUnknown},
		{StatusReplies, int64(1), nil, OutcomeUnknown},
		{StatusReplies, int64(0), nil, OutcomeUnknown},
		{StatusReplies, nil, nil, OutcomeUnknown},
		{StatusReplies, nil, errIO, OutcomeUnknown},
		{StatusReplies, nil, ErrNoScript, OutcomeUnknown},
		{0, "OK", nil, OutcomeUnknown},
		{0, int64(1), nil, OutcomeUnknown},
	}
	for _, tt := range tests {
		if got := tt.r.Outcome(tt.reply, tt.err); got != tt.want {
			t.Errorf("Replies(%d).Outcome(reply %#v, err %v) = %d, want %d", tt.r, tt.reply, tt.err, got, tt.want)
		}
	}
}

func TestRepliesDone(t *testing.T) {
	for _, r := range []Replies{IntReplies, StatusReplies} {
		if got := r.Outcome(r.Done(), nil); got != OutcomeDone {
			t.Errorf("Replies(%d).Outcome(Done() = %#v) = %d, want OutcomeDone", r, r.Done(), got)
		}
	}
	if got := Replies(0).Done(); got != nil {
		t.Errorf("Replies(0).Done() = %#v, want nil", got)
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
	keys := []string{"job:1", "job:2"}
	pending := func(args ...any) registry.Command {
		return registry.Command{Name: "evalsha", Args: append([]any{"evalsha"}, args...), Pending: true}
	}
	tests := []struct {
		name string
		r    Replies
		cmd  registry.Command
		want registry.Action
	}{
		// integer replies: 1 or 0
		{"refresh", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000), refresh(8 * time.Second)},
		{"string expiry", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "2500"), refresh(2500 * time.Millisecond)},
		{"not held", IntReplies, command("evalsha", int64(0), nil, lockSHA1, 1, "job:1", "v1", 8000), notHeld},
		{"to zero deletes", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 0), release},
		{"to negative deletes", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "-10"), release},
		{"to zero, not held", IntReplies, command("evalsha", int64(0), nil, lockSHA1, 1, "job:1", "v1", 0), notHeld},
		{"error", IntReplies, command("evalsha", nil, errIO, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"error with a reply", IntReplies, command("evalsha", int64(1), errIO, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"odd reply", IntReplies, command("evalsha", int64(2), nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"string reply", IntReplies, command("evalsha", "1", nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"status reply", IntReplies, command("evalsha", "OK", nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"nil reply", IntReplies, command("evalsha", nil, nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"redis.Nil", IntReplies, command("evalsha", nil, redis.Nil, lockSHA1, 1, "job:1", "v1", 8000), none},
		{"expiry not a number", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "8s"), none},
		{"float expiry", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000.0), none},
		{"expiry overflows", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", int64(math.MaxInt64)), none},
		{"without expiry", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1"), none},
		{"extra arg", IntReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", 8000, "x"), none},
		// status replies: OK or nil
		{"status refresh", StatusReplies, command("evalsha", "OK", nil, lockSHA1, 1, "job:1", "v1", "8000"), refresh(8 * time.Second)},
		{"status not held", StatusReplies, command("evalsha", nil, redis.Nil, lockSHA1, 1, "job:1", "v1", "8000"), notHeld},
		{"status to zero deletes", StatusReplies, command("evalsha", "OK", nil, lockSHA1, 1, "job:1", "v1", "0"), release},
		{"status error", StatusReplies, command("evalsha", nil, errIO, lockSHA1, 1, "job:1", "v1", "8000"), none},
		{"status noscript", StatusReplies, command("evalsha", nil, ErrNoScript, lockSHA1, 1, "job:1", "v1", "8000"), none},
		{"status integer reply", StatusReplies, command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "8000"), none},
		{"status integer 0", StatusReplies, command("evalsha", int64(0), nil, lockSHA1, 1, "job:1", "v1", "8000"), none},
		{"status nil without error", StatusReplies, command("evalsha", nil, nil, lockSHA1, 1, "job:1", "v1", "8000"), none},
		// several keys
		{"two keys", StatusReplies, command("evalsha", "OK", nil, lockSHA1, 2, "job:1", "job:2", "v1", "8000"),
			registry.Action{Op: registry.OpRefresh, Key: "job:1", Keys: keys, Value: "v1", TTL: 8 * time.Second}},
		{"two keys, not held", StatusReplies, command("evalsha", nil, redis.Nil, lockSHA1, 2, "job:1", "job:2", "v1", "8000"),
			registry.Action{Op: registry.OpNotHeld, Key: "job:1", Keys: keys, Value: "v1"}},
		{"two keys to zero", StatusReplies, command("evalsha", "OK", nil, lockSHA1, 2, "job:1", "job:2", "v1", "0"),
			registry.Action{Op: registry.OpRelease, Key: "job:1", Keys: keys, Value: "v1"}},
		// pending: as if it succeeds, whatever the reply shape
		{"pending", IntReplies, pending(lockSHA1, 1, "job:1", "v1", 8000), refresh(8 * time.Second)},
		{"pending, status", StatusReplies, pending(lockSHA1, 1, "job:1", "v1", "8000"), refresh(8 * time.Second)},
		{"pending to zero", StatusReplies, pending(lockSHA1, 1, "job:1", "v1", "0"), release},
		{"pending, two keys", StatusReplies, pending(lockSHA1, 2, "job:1", "job:2", "v1", "8000"),
			registry.Action{Op: registry.OpRefresh, Key: "job:1", Keys: keys, Value: "v1", TTL: 8 * time.Second}},
		{"pending, expiry not a number", IntReplies, pending(lockSHA1, 1, "job:1", "v1", "8s"), none},
		{"pending, without expiry", IntReplies, pending(lockSHA1, 1, "job:1", "v1"), none},
	}
	for _, tt := range tests {
		if got := Refresh(&tt.cmd, call(t, tt.cmd), tt.r); !SameAction(got, tt.want) {
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
		{"status released", command("evalsha", "OK", nil, unlockSHA1, 1, "job:1", "v1"), release},
		{"status not held", command("evalsha", nil, redis.Nil, unlockSHA1, 1, "job:1", "v1"), release},
		{"error", command("evalsha", nil, errors.New("i/o timeout"), unlockSHA1, 1, "job:1", "v1"), release},
		{"pending", registry.Command{Name: "evalsha", Args: []any{"evalsha", unlockSHA1, 1, "job:1", "v1"}, Pending: true}, release},
		{"two keys", command("evalsha", "OK", nil, unlockSHA1, 2, "job:1", "job:2", "v1"),
			registry.Action{Op: registry.OpRelease, Key: "job:1", Keys: []string{"job:1", "job:2"}, Value: "v1"}},
		{"extra arg", command("evalsha", int64(1), nil, unlockSHA1, 1, "job:1", "v1", 8000), registry.Action{}},
	}
	for _, tt := range tests {
		if got := Release(call(t, tt.cmd)); !SameAction(got, tt.want) {
			t.Errorf("Release(%s: %v) = %+v, want %+v", tt.name, tt.cmd.Args, got, tt.want)
		}
	}
}

func TestSameAction(t *testing.T) {
	a := registry.Action{Op: registry.OpRefresh, Key: "k", Value: "v", TTL: time.Second}
	with := func(f func(*registry.Action)) registry.Action {
		b := a
		f(&b)
		return b
	}
	tests := []struct {
		name string
		a, b registry.Action
		want bool
	}{
		{"same", a, a, true},
		{"zero", registry.Action{}, registry.Action{}, true},
		{"op", a, with(func(b *registry.Action) { b.Op = registry.OpObtain }), false},
		{"key", a, with(func(b *registry.Action) { b.Key = "x" }), false},
		{"value", a, with(func(b *registry.Action) { b.Value = "x" }), false},
		{"ttl", a, with(func(b *registry.Action) { b.TTL = 0 }), false},
		{"keys", with(func(b *registry.Action) { b.Keys = []string{"k", "l"} }), with(func(b *registry.Action) { b.Keys = []string{"k", "l"} }), true},
		{"other keys", with(func(b *registry.Action) { b.Keys = []string{"k", "l"} }), with(func(b *registry.Action) { b.Keys = []string{"k", "m"} }), false},
		{"keys and none", with(func(b *registry.Action) { b.Keys = []string{"k", "l"} }), a, false},
		{"empty and nil keys", with(func(b *registry.Action) { b.Keys = []string{} }), a, false},
	}
	for _, tt := range tests {
		if got := SameAction(tt.a, tt.b); got != tt.want {
			t.Errorf("SameAction(%s: %+v, %+v) = %v, want %v", tt.name, tt.a, tt.b, got, tt.want)
		}
		if got := SameAction(tt.b, tt.a); got != tt.want {
			t.Errorf("SameAction(%s: %+v, %+v) = %v, want %v", tt.name, tt.b, tt.a, got, tt.want)
		}
	}
}

func TestClassifyHelpersAllocs(t *testing.T) {
	p := NewPins(testPins)
	cmds := []registry.Command{
		command("evalsha", int64(1), nil, lockSHA1, 1, "job:1", "v1", "8000"),
		command("evalsha", nil, redis.Nil, lockSHA1, 1, "job:1", "v1", "8000"),
		{Name: "evalsha", Args: []any{"evalsha", lockSHA1, 1, "job:1", "v1", "8000"}, Pending: true},
	}
	n := testing.AllocsPerRun(100, func() {
		for _, c := range cmds {
			if call, ok := p.Call(c.Name, c.Args); ok {
				Refresh(&c, &call, IntReplies)
				Refresh(&c, &call, StatusReplies)
				Release(&call)
			}
		}
	})
	if n != 0 {
		t.Errorf("Pins.Call, Refresh and Release of a one-key EVALSHA allocate %v times, want 0", n)
	}
}
