package watchdog

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// A job's context is asked with the table locked when the holder's own
// command about its lock waits for a renewal on its way: the registry's
// hook passes the command's context to table.Mark, which, with the table
// locked, hands it to context.AfterFunc (that asks its Value) and asks its
// Err. A holder that refreshes or releases with the job's context is the
// usual case. Past the lock's tell time, before its scheduler has told it,
// the context's look at the lock must not wait for that table lock: it
// would wait for itself, and the table (every lock of the client) would
// be stuck for good. Seen failing without the look's try: Mark never
// returned, and the renewal's end that would wake it waited for the table
// too.
func TestAskWhileHolderWaitsForRenewal(t *testing.T) {
	defer SetPassDelay(time.Second)() // the scheduler is late: the look is the first to tell
	reg, tb := answeredTable(t)
	w, err := Attach(reg)
	if err != nil {
		t.Fatal(err)
	}
	const ttl = 100 * time.Millisecond
	e, tracked := tb.ApplyNow(&table.Change{Op: table.OpObtain, Key: "job", Value: "token", TTL: ttl})
	if !tracked {
		t.Fatal("obtain not tracked")
	}
	ctx, cancel := w.Context(context.Background(), "job")
	defer cancel()
	held := tb.Hold([]*table.Entry{e}) // a renewal on its way, whose answer does not come
	if len(held) != 1 {
		t.Fatalf("Hold took %d entries, want the lock", len(held))
	}
	sent := w.set.Now()
	time.Sleep(ttl) // past the tell time, the scheduler not there yet

	marked := make(chan table.Marked, 1)
	go func() { marked <- tb.Mark(ctx, "job", "token", 0) }()
	time.Sleep(50 * time.Millisecond) // Mark waits for the renewal, asking ctx
	ended := make(chan struct{})
	go func() {
		tb.Settle(held, []int8{table.Failed}, sent, nil) // the renewal ends without an answer
		close(ended)
	}()
	deadline := time.After(5 * time.Second)
	select {
	case m := <-marked:
		tb.Unmark(m)
	case <-deadline:
		t.Fatal("the holder's Mark did not return within 5s of the renewal's end: the context's look waits for the table Mark holds (deadlock; goroutines left stuck)")
	}
	select {
	case <-ended:
	case <-deadline:
		t.Fatal("the renewal's end did not return: the table stays locked (deadlock)")
	}
	// An ask made while another goroutine holds the table (the context's
	// own timer looking at the lock, say) does not look, and the next ask
	// does: asked until told, within half the scheduler's delay, so that
	// the tell is the asking's or the timer's, not the scheduler's. (One
	// ask alone found the table held in local CI run 205, the newest Go
	// beside the other steps: Err nil.)
	for until := time.Now().Add(500 * time.Millisecond); ctx.Err() == nil && time.Now().Before(until); {
		time.Sleep(time.Millisecond)
	}
	if err := ctx.Err(); err == nil || !errors.Is(context.Cause(ctx), ErrUnconfirmed) {
		t.Errorf("asked after its tell time with no renewal confirmed, for 500 ms: Err %v, cause %v; want cancelled with ErrUnconfirmed", err, context.Cause(ctx))
	}
	w.Stop()
}
