package watchdog_test

import (
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockwatch/lockwatch/registry"
	"github.com/lockwatch/lockwatch/watchdog"
)

// "@every" is parsed by the watchdog, not rounded to whole seconds as
// robfig/cron's own Every does.
func TestScheduleEveryIsExact(t *testing.T) {
	for _, tc := range []struct {
		spec   string
		window time.Duration
		want   int64
	}{
		{"@every 10ms", 2205 * time.Millisecond, 220},
		{"@every 1500ms", 6100 * time.Millisecond, 4},
		{"@every  250ms ", 1010 * time.Millisecond, 4},
	} {
		t.Run(tc.spec, func(t *testing.T) {
			watchdog.Bubble(t, func(t *testing.T) {
				wd, err := watchdog.Attach(registry.New(validateAdapter{}), watchdog.WithSchedule(tc.spec))
				if err != nil {
					t.Fatal(err)
				}
				defer wd.Stop()
				time.Sleep(tc.window)
				synctest.Wait()
				if got := wd.Stats().Ticks; got != tc.want {
					t.Errorf("ticks in %v under %q = %d, want %d", tc.window, tc.spec, got, tc.want)
				}
			})
		})
	}
}

func TestScheduleEveryRejectsBadIntervals(t *testing.T) {
	for _, spec := range []string{"@every 0s", "@every -1s", "@every -10ms", "@every 500us", "@every", "@every soon"} {
		wd, err := watchdog.Attach(registry.New(validateAdapter{}), watchdog.WithSchedule(spec))
		if err == nil {
			wd.Stop()
			t.Errorf("Attach(WithSchedule(%q)) = nil error, want one", spec)
			continue
		}
		if !strings.Contains(err.Error(), "WithSchedule") {
			t.Errorf("Attach(WithSchedule(%q)) = %v, want the error to name WithSchedule", spec, err)
		}
	}
}
