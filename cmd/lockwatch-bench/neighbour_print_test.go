package main

import (
	"bytes"
	"strings"
	"testing"
)

// A pool whose application failed commands in the blocks without
// lockwatch has no baseline: its app and Release rises are not judged,
// while another pool's rise over the budget still is, and PING (another
// process) is judged either way.
func TestNeighbourVerdict(t *testing.T) {
	r := &neighbourResult{BudgetMS: 3, Pools: []neighbourPool{
		{Pool: "default", AppP99RiseMS: 5, PingP99RiseMS: 1, ReleaseP99RiseMS: 5},
		{Pool: "small", AppP99RiseMS: 40, PingP99RiseMS: 4, ReleaseP99RiseMS: 40,
			Without: neighbourMode{App: latency{Errors: 12}, Release: latency{Errors: 3}}},
	}}
	var b bytes.Buffer
	printNeighbour(&b, r)
	var def, small string
	for _, l := range strings.Split(b.String(), "\n") {
		switch {
		case strings.HasPrefix(l, "  default pool: p99 rise"):
			def = l
		case strings.HasPrefix(l, "  small pool: p99 rise"):
			small = l
		}
	}
	if !strings.Contains(def, "app +5.00 ms OVER") || !strings.Contains(def, "Release +5.00 ms OVER") || strings.Contains(def, "NOT JUDGED") {
		t.Errorf("default pool's line = %q, want app and Release OVER, judged", def)
	}
	if want := "app +40.00 ms NOT JUDGED (15 of the application's commands failed without lockwatch)"; !strings.Contains(small, want) {
		t.Errorf("small pool's line = %q, want %q", small, want)
	}
	if !strings.Contains(small, "PING +4.00 ms OVER") {
		t.Errorf("small pool's line = %q, want PING judged (OVER)", small)
	}
}
