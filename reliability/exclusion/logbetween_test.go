package exclusion_test

import (
	"slices"
	"testing"
	"time"
)

func TestLogBetween(t *testing.T) {
	log := []string{
		`time=2026-11-30T16:00:00.100Z level=DEBUG msg="watchdog: renewed" locks=1`,
		`not a line of slog's`,
		`time=2026-11-30T16:00:00.200Z level=WARN msg="watchdog: renewal not answered in time; sent again"`,
		`time=2026-11-30T16:00:00.300Z level=DEBUG msg="watchdog: renewed" locks=2`,
		`time=2026-11-30T16:00:00.400Z level=DEBUG msg="watchdog: renewed" locks=3`,
	}
	at := func(ms int) time.Time { return time.Date(2026, 11, 30, 16, 0, 0, ms*int(time.Millisecond), time.UTC) }
	if got, want := logBetween(log, at(150), at(300), 10), []string{log[2], log[3]}; !slices.Equal(got, want) {
		t.Errorf("from 150 to 300 ms: got %q, want %q", got, want)
	}
	if got, want := logBetween(log, at(0), at(500), 2), []string{log[0], log[2], "…"}; !slices.Equal(got, want) {
		t.Errorf("at most 2: got %q, want %q", got, want)
	}
}

func TestSchedulerStall(t *testing.T) {
	log := []string{
		`time=2026-12-01T01:45:52.100Z level=WARN msg="watchdog: holders told after their lock's deadline (E minus the drift allowance)" endpoint=x locks=1 key=k late_by=29ms scheduler_woke_late=105.25ms table_lock_wait=49µs since_last_pass=185ms`,
		`time=2026-12-01T01:45:52.200Z level=WARN msg="watchdog: holders told after their lock's deadline (E minus the drift allowance)" endpoint=x locks=1 key=k late_by=3ms scheduler_woke_late=18µs table_lock_wait=94µs since_last_pass=34ms`,
		`time=2026-12-01T01:45:52.300Z level=DEBUG msg="watchdog: renewed" locks=1`,
		`time=2026-12-01T01:45:52.360Z level=DEBUG msg="watchdog: renewals sent after their deadline" endpoint=x locks=1 scheduler_woke_late=120ms table_lock_wait=3µs since_last_pass=160ms`,
		`time=2026-12-01T01:45:52.380Z level=DEBUG msg="watchdog: renew call started after its locks' deadline" endpoint=x locks=1 call_started_late=140ms`,
		`time=2026-12-01T01:45:52.400Z level=WARN msg="watchdog: holders told after their lock's deadline (E minus the drift allowance)" endpoint=x locks=1 key=k late_by=3ms scheduler_woke_late=300ms table_lock_wait=1ms since_last_pass=300ms`,
	}
	at := func(ms int) time.Time { return time.Date(2026, 12, 1, 1, 45, 52, ms*int(time.Millisecond), time.UTC) }
	for _, c := range []struct {
		from, to int
		want     time.Duration
	}{
		{0, 350, 105250 * time.Microsecond},
		{150, 350, 18 * time.Microsecond},
		{250, 350, 0},
		{250, 370, 120 * time.Millisecond},
		{250, 390, 140 * time.Millisecond},
		{375, 390, 140 * time.Millisecond},
		{0, 500, 300 * time.Millisecond},
	} {
		if got := schedulerStall(log, at(c.from), at(c.to)); got != c.want {
			t.Errorf("from %d to %d ms: got %v, want %v", c.from, c.to, got, c.want)
		}
	}
}
