package isolation_test

import (
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/adapters/bsmredislock"
	"github.com/lockwatch/lockwatch/adapters/goredsync"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// TestAttachRefusesUnworkableSettings: settings under which the watchdog
// cannot keep a lock alive must be refused by Attach with an error, not
// accepted and silently fail: a schedule that never fires (February 30),
// a renewal timeout below a millisecond, a max hold below a second (a
// bare 60 is 60 ns, almost surely meant as seconds). WithMaxHold(0), no
// bound, stays allowed.
func TestAttachRefusesUnworkableSettings(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name string
		opt  watchdog.Option
	}{
		{`WithSchedule("0 0 30 2 *") never fires`, watchdog.WithSchedule("0 0 30 2 *")},
		{`WithSchedule("0 0 0 31 4 *") never fires`, watchdog.WithSchedule("0 0 0 31 4 *")},
		{"WithTimeout(time.Microsecond) is below 1ms", watchdog.WithTimeout(time.Microsecond)},
		{"WithMaxHold(60) is 60ns, below 1s", watchdog.WithMaxHold(60)},
		{"WithMaxHold(999ms) is below 1s", watchdog.WithMaxHold(999 * time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reg := registry.New(bsmredislock.New(), goredsync.New())
			wd, err := watchdog.Attach(reg, c.opt)
			if err == nil {
				wd.Stop()
				t.Fatalf("watchdog.Attach with %s: got nil error, want the setting refused", c.name)
			}
			t.Logf("refused: %v", err)
		})
	}
	for _, c := range []struct {
		name string
		opt  watchdog.Option
	}{
		{"WithMaxHold(0) means no bound", watchdog.WithMaxHold(0)},
		{"WithMaxHold(time.Second)", watchdog.WithMaxHold(time.Second)},
		{"WithTimeout(time.Millisecond)", watchdog.WithTimeout(time.Millisecond)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			reg := registry.New(bsmredislock.New(), goredsync.New())
			wd, err := watchdog.Attach(reg, c.opt)
			if err != nil {
				t.Fatalf("watchdog.Attach with %s: got %v, want it accepted", c.name, err)
			}
			wd.Stop()
		})
	}
}
