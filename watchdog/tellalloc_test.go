package watchdog

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// TestTellAllocatesNothing tells the holders of 100 locks that no renewal
// was confirmed in time, with no context following them and the default
// logger (which writes nothing), and checks that the tell allocates
// nothing. The scheduler tells: in a process that allocates fast while
// starved of CPU (TestStarvedHolder beside five burner processes, runtime
// trace, 2026-12-03), its allocation of each lock's UnconfirmedError
// before it looked whether any context followed the lock drafted it into
// the collector's mark termination for 197 ms, and the next renewals of
// all 200 locks of its lane waited for it; 100 expired together. Seen
// failing before the change: 100 allocations a tell.
func TestTellAllocatesNothing(t *testing.T) {
	reg, tb := answeredTable(t)
	w, err := Attach(reg)
	if err != nil {
		t.Fatal(err)
	}
	// Stopped first: AllocsPerRun counts every goroutine's allocations,
	// and a running watchdog's own (its wake probe, its cron) would count
	// as the tell's on a busy machine. A tell needs none of them.
	w.Stop()
	var es []*table.Entry
	for i := range 100 {
		c := table.Change{Op: table.OpObtain, Key: fmt.Sprint("tell:", i), Value: "token", TTL: 300 * time.Millisecond}
		e, tracked := tb.ApplyNow(&c)
		if !tracked || e == nil {
			t.Fatalf("obtain of %s not tracked", c.Key)
		}
		es = append(es, e)
	}
	before := w.unconfirmed.Load()
	tell := func() { w.tellUnconfirmedOn(tb, "127.0.0.1:1", 0, es, nil, nil) }
	tell()
	if told := w.unconfirmed.Load() - before; told != int64(len(es)) {
		t.Fatalf("a tell of %d locks counted %d told, want all of them (the scenario did not happen)", len(es), told)
	}
	if n := testing.AllocsPerRun(100, tell); n != 0 {
		t.Errorf("telling the holders of %d locks allocated %v times, want 0", len(es), n)
	}
}
