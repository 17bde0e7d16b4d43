package watchdog

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockwatch/lockwatch/internal/table"
)

// BenchmarkFastLaneObtain records obtains of 8 s locks in a table the way
// the registry's hook does, without a watchdog and with one attached on its
// defaults (the 10 s schedule puts every such lock in the fast lane): the
// difference is what the watchdog's own work adds to the hook for each
// lock, its decision and the due list, apart from the rest of a client's
// path. The 1,024 locks are released a batch at a time with the timer
// stopped, as BenchmarkRedsyncLock in the registry package does.
func BenchmarkFastLaneObtain(b *testing.B) {
	for _, attached := range []bool{false, true} {
		name := "registry"
		if attached {
			name = "registry+watchdog"
		}
		b.Run(name, func(b *testing.B) {
			reg, t := answeredTable(b)
			if attached {
				w, err := Attach(reg)
				if err != nil {
					b.Fatal(err)
				}
				defer w.Stop()
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = fmt.Sprint("job:", i)
			}
			obtain := table.Change{Op: table.OpObtain, Value: "token", TTL: 8 * time.Second}
			release := table.Change{Op: table.OpRelease, Value: "token"}
			i := 0
			b.ReportAllocs()
			for b.Loop() {
				obtain.Key = keys[i]
				if _, tracked := t.ApplyNow(&obtain); !tracked {
					b.Fatalf("obtain of %s not tracked", keys[i])
				}
				if i++; i == len(keys) {
					b.StopTimer()
					for _, k := range keys {
						release.Key = k
						t.ApplyNow(&release)
					}
					i = 0
					b.StartTimer()
				}
			}
		})
	}
}
