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
