package watchdog

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/lockwatch/lockwatch/internal/table"
)

// TestTimeqOrder pushes, pops and drops slots at random and checks every
// pop against a sorted copy of what the heap should hold: the earliest
// slot first, whatever the heap's shape.
func TestTimeqOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	entries := make([]*table.Entry, 64)
	for i := range entries {
		entries[i] = new(table.Entry)
	}
	for round := range 200 {
		var q timeq
		var want []tslot
		for range rng.IntN(3000) {
			switch op := rng.IntN(10); {
			case op < 6 || len(want) == 0:
				s := tslot{at: rng.Int64N(1000), e: entries[rng.IntN(len(entries))], gen: uint8(rng.IntN(256))}
				q.push(s.at, s.e, s.gen)
				want = append(want, s)
			case op < 9:
				h, ok := q.head()
				if !ok {
					t.Fatalf("round %d: head of a heap of %d slots: none", round, len(want))
				}
				got := q.pop()
				if got != h {
					t.Fatalf("round %d: pop %+v, head said %+v", round, got, h)
				}
				if first := slices.MinFunc(want, byAt); got.at != first.at {
					t.Fatalf("round %d: pop at %d, want the earliest, %d (heap of %d)", round, got.at, first.at, len(want))
				}
				// Remove the popped slot itself from want (one of those at
				// the same time).
				i := slices.Index(want, got)
				if i < 0 {
					t.Fatalf("round %d: pop %+v, a slot never pushed or popped twice", round, got)
				}
				want = slices.Delete(want, i, i+1)
			default:
				drop := entries[rng.IntN(len(entries))]
				q.keep(func(e *table.Entry) bool { return e != drop })
				want = slices.DeleteFunc(want, func(s tslot) bool { return s.e == drop })
			}
			if len(q) != len(want) {
				t.Fatalf("round %d: heap holds %d slots, want %d", round, len(q), len(want))
			}
		}
		slices.SortFunc(want, byAt)
		for i := range want {
			if got := q.pop(); got.at != want[i].at {
				t.Fatalf("round %d: draining, pop %d at %d, want %d", round, i, got.at, want[i].at)
			}
		}
		if _, ok := q.head(); ok {
			t.Fatalf("round %d: head of a drained heap: a slot", round)
		}
	}
}

func byAt(a, b tslot) int { return cmp.Compare(a.at, b.at) }

// BenchmarkTimeq is the scheduler's steady state with n locks listed: the
// earliest slot popped and its lock pushed again a period later (a
// renewal), the period spread so that the heap keeps mixing. The heap is
// warm in the cache here; in a storm the application's work evicts it
// between passes, and a pop costs more. A four-ary heap measured no
// faster, warm or with the cache evicted between operations (2026-12-02),
// and was not taken.
func BenchmarkTimeq(b *testing.B) {
	for _, n := range []int{1_000, 50_000, 200_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			rng := rand.New(rand.NewPCG(3, 4))
			const period = 500_000_000
			var q timeq
			for range n {
				q.push(rng.Int64N(period), new(table.Entry), 0)
			}
			for b.Loop() {
				s := q.pop()
				q.push(s.at+period-period/8+rng.Int64N(period/4), s.e, s.gen)
			}
		})
	}
}
