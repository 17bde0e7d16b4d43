package exclusion_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/scripts"
	lwscripts "github.com/lockwatch/lockwatch/scripts"
)

// The checkers of the scenarios, on made-up input: they must find what
// they look for.

func TestParseMonitorLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		lua  bool
		args []string
	}{
		{`+1700000000.123456 [0 127.0.0.1:5000] "evalsha" "abc" "1" "k"`, false, []string{"evalsha", "abc", "1", "k"}},
		{`+1700000000.123456 [0 lua] "PEXPIRE" "k" "200"`, true, []string{"PEXPIRE", "k", "200"}},
		{`+1.0 [3 unix:/tmp/r.sock] "set" "a\"b\\c" "x\r\ny\t\x00\xff"`, false, []string{"set", `a"b\c`, "x\r\ny\t\x00\xff"}},
		{`+1.0 [0 127.0.0.1:1] "ping"`, false, []string{"ping"}},
	} {
		got, err := parseMonitorLine(tc.in)
		if err != nil {
			t.Errorf("parseMonitorLine(%q) error %v, want nil", tc.in, err)
			continue
		}
		if got.lua != tc.lua || !slices.Equal(got.args, tc.args) {
			t.Errorf("parseMonitorLine(%q) = lua %v %q, want lua %v %q", tc.in, got.lua, got.args, tc.lua, tc.args)
		}
	}
	for _, bad := range []string{
		`1.0 [0 lua] "get"`,           // no +
		`+1.0 "get"`,                  // no [db client]
		`+1.0 [0 lua] "get`,           // unterminated
		`+1.0 [0 lua] get`,            // unquoted
		`+1.0 [0 lua] "\q"`,           // unknown escape
		`+1.0 [0 lua] "\x4"`,          // short \x
		`-ERR something went wrong`,   // an error line
		`+1.0 [0 lua] "a" "b\"`,       // escaped closing quote
		`+1.0 [0 127.0.0.1:1] "x" "\`, // dangling backslash
	} {
		if got, err := parseMonitorLine(bad); err == nil {
			t.Errorf("parseMonitorLine(%q) = %+v, nil; want an error", bad, got)
		}
	}
}

func TestAnalyseRenewals(t *testing.T) {
	line := func(lua bool, args ...string) monLine { return monLine{lua: lua, args: args} }
	renew := func(key, value string) monLine {
		return line(false, "evalsha", lwscripts.RenewSHA1, "1", key, scripts.ModeShared, value, "5000")
	}
	release := line(false, "evalsha", redislockV094ReleaseSHA1, "1", "k", "v")
	stream := []monLine{
		renew("k", "v"), line(true, "MGET", "k"), line(true, "PEXPIRE", "k", "5000"), // renewed
		release, line(true, "get", "k"), line(true, "del", "k"),
		renew("k", "v"), line(true, "MGET", "k"), line(true, "EXISTS", "k"), // in the window: found the key gone
		line(false, "echo", "released k v"),
		renew("k", "v"), line(true, "MGET", "k"), line(true, "SET", "k", "x"), // after the return, and a SET
	}
	cmds, ran := groupScripts(stream, false)
	an := analyseRenewals(cmds, ran)
	if an.renewCalls != 3 || an.extended != 1 || an.inWindow != 1 || len(an.afterReturn) != 1 || len(an.badScriptCmds) != 1 || len(an.extendedAfterRelease) != 0 {
		t.Errorf("analyseRenewals = calls %d, extended %d, in window %d, after return %q, bad %q, extended after release %q; want 3, 1, 1, one, one, none",
			an.renewCalls, an.extended, an.inWindow, an.afterReturn, an.badScriptCmds, an.extendedAfterRelease)
	}
	if !an.renewedInWindow(lockID{"k", "v"}) {
		t.Errorf("renewedInWindow(k v) = false, want true")
	}
	if n := an.renewedThenReleased(); n != 1 {
		t.Errorf("renewedThenReleased() = %d, want 1", n)
	}

	// Scripts logged before their call (luaFirst), and an extension after
	// the release script.
	stream = []monLine{
		line(true, "get", "k"), line(true, "del", "k"), release,
		line(true, "MGET", "k"), line(true, "PEXPIRE", "k", "5000"), renew("k", "v"),
	}
	cmds, ran = groupScripts(stream, true)
	an = analyseRenewals(cmds, ran)
	if len(an.extendedAfterRelease) != 1 {
		t.Errorf("extendedAfterRelease = %q, want one", an.extendedAfterRelease)
	}

	// redislock v0.10.0's release (MGET, then DEL), calls naming several
	// locks in each of the renew script's modes, and a renewal after the
	// release returned that names the lock second in its call: each lock
	// is judged by its own value, wherever it sits in the call.
	releaseV010 := line(false, "evalsha", redislockV010ReleaseSHA1, "1", "b", "vb")
	stream = []monLine{
		line(false, "evalsha", lwscripts.RenewSHA1, "2", "a", "b", scripts.ModePerLock, "va", "vb", "5000", "6000"),
		line(true, "TIME"), line(true, "MGET", "a", "b"), line(true, "PEXPIREAT", "a", "1700000005000", "GT"), line(true, "PEXPIRE", "b", "6000"),
		releaseV010, line(true, "mget", "b"), line(true, "del", "b"),
		line(false, "echo", "released b vb"),
		line(false, "evalsha", lwscripts.RenewSHA1, "4", "a", "b", "m1", "m2", scripts.ModeMulti, "1", "va", "5000", "1", "vb", "5000", "2", "vm", "5000"),
		line(true, "MGET", "a", "b", "m1", "m2"), line(true, "EXISTS", "b"),
	}
	cmds, ran = groupScripts(stream, false)
	an = analyseRenewals(cmds, ran)
	if _, ok := an.released[lockID{"b", "vb"}]; !ok {
		t.Errorf("released = %v, want b vb released by redislock v0.10.0's release script", an.released)
	}
	if an.renewCalls != 2 || an.named != 6 || an.extended != 2 || len(an.afterReturn) != 1 || len(an.badScriptCmds) != 0 {
		t.Errorf("analyseRenewals = calls %d, named %d, extended %d, after return %q, bad %q; want 2, 6, 2, one (b vb), none",
			an.renewCalls, an.named, an.extended, an.afterReturn, an.badScriptCmds)
	}
	if n := an.renewedLocks[lockID{"b", "vb"}]; n != 1 {
		t.Errorf("renewals of b vb = %d, want 1 (the first call, before the release)", n)
	}
	if n := an.renewedThenReleased(); n != 1 {
		t.Errorf("renewedThenReleased() = %d, want 1", n)
	}
}

// renewedKeys reads each mode of the renew script's arguments, and refuses
// arguments that do not fit the keys.
func TestRenewedKeys(t *testing.T) {
	for _, tc := range []struct {
		keys, argv []string
		want       []lockID
	}{
		{[]string{"a", "b"}, []string{"s", "va", "vb", "100"}, []lockID{{"a", "va"}, {"b", "vb"}}},
		{[]string{"a", "b"}, []string{"p", "va", "vb", "100", "200"}, []lockID{{"a", "va"}, {"b", "vb"}}},
		{[]string{"a", "b", "c", "d"}, []string{"m", "3", "x", "100", "1", "y", "200"}, []lockID{{"a", "x"}, {"b", "x"}, {"c", "x"}, {"d", "y"}}},
	} {
		got, err := renewedKeys(tc.keys, tc.argv)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("renewedKeys(%q, %q) = %v, %v; want %v, nil", tc.keys, tc.argv, got, err, tc.want)
		}
	}
	for _, tc := range []struct{ keys, argv []string }{
		{[]string{"a"}, nil},                                 // no mode
		{[]string{"a"}, []string{"x", "va", "100"}},          // unknown mode
		{[]string{"a", "b"}, []string{"s", "va", "100"}},     // a value short
		{[]string{"a", "b"}, []string{"p", "va", "vb", "1"}}, // a TTL short
		{[]string{"a", "b"}, []string{"m", "3", "x", "100"}}, // more keys than the call has
		{[]string{"a", "b"}, []string{"m", "1", "x", "100"}}, // a key left over
		{[]string{"a", "b"}, []string{"m", "2", "x"}},        // no TTL
		{[]string{"a", "b"}, []string{"m", "0", "x", "100"}}, // a lock with no key
		{[]string{"a"}, []string{"v", "100"}},                // the layout before modes
	} {
		if got, err := renewedKeys(tc.keys, tc.argv); err == nil {
			t.Errorf("renewedKeys(%q, %q) = %v, nil; want an error", tc.keys, tc.argv, got)
		}
	}
}

func TestAnalyseOverlaps(t *testing.T) {
	at := func(ms int) time.Time { return time.Unix(1000, 0).Add(time.Duration(ms) * time.Millisecond) }
	ev := func(w, key, section int, enter bool, ms int) sectionEvent {
		return sectionEvent{worker: w, key: key, section: section, enter: enter, at: at(ms)}
	}
	a := analyse([]sectionEvent{
		ev(0, 0, 0, true, 0), ev(0, 0, 0, false, 100), // back to back: no overlap
		ev(1, 0, 0, true, 101), ev(2, 1, 0, true, 120), // another key: no overlap
		ev(0, 0, 1, true, 150), // worker 0 in while worker 1 is: overlap of 50 ms
		ev(1, 0, 0, false, 200), ev(2, 1, 0, false, 210), ev(0, 0, 1, false, 300),
	})
	if len(a.problems) != 0 || len(a.overlaps) != 1 {
		t.Fatalf("analyse: problems %q, overlaps %+v; want none and one", a.problems, a.overlaps)
	}
	o := a.overlaps[0]
	if o.key != 0 || o.a.worker != 1 || o.b.worker != 0 || o.duration() != 50*time.Millisecond {
		t.Errorf("overlap = key %d, workers %d then %d, %v; want key 0, workers 1 then 0, 50ms", o.key, o.a.worker, o.b.worker, o.duration())
	}
	if a.sections[0] != 2 || a.sections[1] != 1 || a.sections[2] != 1 {
		t.Errorf("sections = %v, want 0:2 1:1 2:1", a.sections)
	}
	a = analyse([]sectionEvent{ev(0, 0, 0, false, 0), ev(1, 0, 0, true, 1)})
	if len(a.problems) != 2 {
		t.Errorf("analyse of an exit without enter and an enter without exit: problems %q, want two", a.problems)
	}
}
