package watchdog_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// The debug page shows every counter of Stats under its own name: each
// field is given a value of its own here, so that one shown in another's
// place, or not at all, is seen.
func TestPageCounters(t *testing.T) {
	st := watchdog.Stats{
		Ticks: 1, Sweeps: 2, Renewals: 3, Lost: 4, Failures: 5, DeadlinesMissed: 6,
		Hedges: 7, Unconfirmed: 8, RenewErrors: 9, CallbackPanics: 10,
		Losses:   watchdog.Losses{Gone: 11, Taken: 12, Unreachable: 13, MaxHold: 14, Quorum: 15},
		Lateness: 16500 * time.Microsecond, Tracked: 17, FastLane: 18,
	}
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	ep := watchdog.EndpointStats{
		Endpoint: "10.0.0.1:6379", Renewed: 21, Failed: 22, Lost: 23, Sweeps: 24, FastLane: 25,
		Missed: 26, Hedges: 27, Down: true, LastError: errors.New("boom"),
		LastOK: now.Add(-28 * time.Millisecond), LastSweep: 29 * time.Millisecond,
	}
	sb, eb, err := watchdog.PageCounters(st, ep, now)
	if err != nil {
		t.Fatal(err)
	}
	var s, e map[string]any
	if err := json.Unmarshal(sb, &s); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(eb, &e); err != nil {
		t.Fatal(err)
	}
	losses, _ := s["losses"].(map[string]any)
	for _, tc := range []struct {
		in   map[string]any
		name string
		want any
	}{
		{s, "ticks", 1.0}, {s, "sweeps", 2.0}, {s, "renewals", 3.0}, {s, "lost", 4.0}, {s, "failures", 5.0},
		{s, "deadlines_missed", 6.0}, {s, "hedges", 7.0}, {s, "unconfirmed", 8.0}, {s, "renew_errors", 9.0},
		{s, "callback_panics", 10.0}, {s, "lateness", "16.5ms"}, {s, "lateness_ms", 16.5}, {s, "tracked", 17.0},
		{s, "fast_lane", 18.0},
		{losses, "gone", 11.0}, {losses, "taken", 12.0}, {losses, "unreachable", 13.0}, {losses, "max_hold", 14.0}, {losses, "quorum", 15.0},
		{e, "endpoint", "10.0.0.1:6379"}, {e, "renewed", 21.0}, {e, "failed", 22.0}, {e, "lost", 23.0}, {e, "sweeps", 24.0},
		{e, "fast_lane", 25.0}, {e, "missed", 26.0}, {e, "hedges", 27.0}, {e, "down", true}, {e, "last_error", "boom"},
		{e, "last_ok_ago_ms", 28.0}, {e, "last_sweep_ms", 29.0},
	} {
		if got := tc.in[tc.name]; got != tc.want {
			t.Errorf("%s = %v (%T), want %v", tc.name, got, got, tc.want)
		}
	}
}
