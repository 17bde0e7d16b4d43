package main

import (
	"bytes"
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A PING that comes back late counts as a stall of the Redis side.
func TestStallMeterNotesASlowProbe(t *testing.T) {
	var slow atomic.Bool
	slow.Store(true)
	const hang = 80 * time.Millisecond
	start := time.Now()
	m := startStallMeter(time.Millisecond, func(context.Context) error {
		if slow.Swap(false) {
			time.Sleep(hang)
		}
		return nil
	})
	deadline := time.Now().Add(5 * time.Second)
	for m.longest(start, time.Now()) < hang && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	m.Stop()
	if got := m.longest(start, time.Now()); got < hang {
		t.Errorf("after a probe that hung %v: longest stall %v, want at least it", hang, got)
	}
	if got := m.longest(start.Add(-time.Hour), start.Add(-time.Minute)); got != 0 {
		t.Errorf("longest stall in an hour before the meter started = %v, want 0", got)
	}
}

func TestJudgeHeld(t *testing.T) {
	const ttl = 3 * time.Second
	sampled := time.Now()
	tests := []struct {
		name    string
		pttl    time.Duration
		stall   time.Duration // ended just before the sample
		broken  bool
		printed string
	}{
		{"held", 2 * time.Second, 0, false, ""},
		{"below a third, no stall", 900 * time.Millisecond, 0, true, "BROKEN"},
		{"below a third, short stall", 900 * time.Millisecond, 500 * time.Millisecond, true, "BROKEN"},
		{"below a third after a stall of a third", 900 * time.Millisecond, time.Second, false, "stood still for 1s; not counted"},
		{"gone after a long stall", -2, 2 * time.Second, false, "key gone"},
		{"no expiry, whatever the stall", -1, 2 * time.Second, true, "no expiry"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			d := &demo{out: &out, checks: &checker{out: &out}, stalls: &stallMeter{}}
			if tt.stall > 0 {
				d.stalls.note(sampled.Add(-time.Millisecond), tt.stall)
			}
			d.judgeHeld("k", ttl, tt.pttl, sampled)
			if _, n := d.checks.list(); (n > 0) != tt.broken {
				t.Errorf("judgeHeld(PTTL %v, stall %v) counted %d broken, want broken=%v; output %q", tt.pttl, tt.stall, n, tt.broken, out.String())
			}
			if !strings.Contains(out.String(), tt.printed) {
				t.Errorf("judgeHeld(PTTL %v, stall %v) printed %q, want it to contain %q", tt.pttl, tt.stall, out.String(), tt.printed)
			}
		})
	}
}
