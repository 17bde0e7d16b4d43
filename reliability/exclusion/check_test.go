package exclusion_test

import (
	"slices"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/scripts"
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
		return line(false, "evalsha", scripts.RenewSHA1, "1", key, value, "5000")
	}
	release := line(false, "evalsha", redislockReleaseSHA1, "1", "k", "v")
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
