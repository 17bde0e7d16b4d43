package watchdog

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// TestBuildAllocatesNothing builds renew calls of every shape and checks
// that building them, once the pipe's buffers have grown, allocates
// nothing. The scheduler builds with the table locked: in a process whose
// collector runs all the time (the starved holder, GOMAXPROCS=2, 200 MB/s
// of garbage), an allocation there drafted the scheduler into the
// collector's mark termination, 74 times in ten seconds and up to 103 ms
// each (runtime trace, 2026-12-02), with the table locked the whole time:
// every renew call's answer and every holder's obtain waited behind it.
// TTLs above 255 ms and every mode argument were boxed anew on each build.
func TestBuildAllocatesNothing(t *testing.T) {
	long := strings.Repeat("v", table.DigestAbove+1)
	for _, tc := range []struct {
		name  string
		ttl   func(i int) time.Duration
		keys  int // keys per lock
		value string
	}{
		{"one TTL", func(int) time.Duration { return 300 * time.Millisecond }, 1, "token"},
		{"a TTL per lock", func(i int) time.Duration { return time.Duration(300+i) * time.Millisecond }, 1, "token"},
		{"several keys a lock", func(int) time.Duration { return 2 * time.Second }, 3, "token"},
		{"digests", func(int) time.Duration { return 1500 * time.Millisecond }, 1, long},
		{"digests, several keys a lock", func(int) time.Duration { return 1500 * time.Millisecond }, 2, long},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, tb := answeredTable(t)
			var es []*table.Entry
			for i := range 300 {
				c := table.Change{Op: table.OpObtain, Key: fmt.Sprint("build:", i), Value: tc.value, TTL: tc.ttl(i)}
				if tc.keys > 1 {
					for k := range tc.keys {
						c.Keys = append(c.Keys, fmt.Sprintf("build:%d:%d", i, k))
					}
					c.Key = c.Keys[0]
				}
				e, tracked := tb.ApplyNow(&c)
				if !tracked || e == nil {
					t.Fatalf("obtain of %s not tracked", c.Key)
				}
				es = append(es, e)
			}
			p := &pipe{}
			build := func() {
				p.reset()
				p.entries = append(p.entries, es...)
				tb.Lock()
				order(p.entries)
				p.build(tb, DefaultChunkSize, tb.Set().Since(time.Now()), 0, 0)
				tb.Unlock()
			}
			build() // the buffers grow once
			if len(p.ends) < 3 {
				t.Fatalf("%d calls built for 300 locks in chunks of %d keys, want 3 or more", len(p.ends), DefaultChunkSize)
			}
			if n := testing.AllocsPerRun(100, build); n != 0 {
				t.Errorf("building %d renew calls allocated %v times, want 0", len(p.ends), n)
			}
		})
	}
}
