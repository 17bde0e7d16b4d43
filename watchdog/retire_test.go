package watchdog_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A client the application closes while its endpoint is down gives its
// lanes back after a second, as an idle client does. A down endpoint's
// lane stays listed for minutes while its client lives, so that the
// endpoint-down alert sees it; a closed client's endpoint is no one's
// concern. Before, a tenant's client whose last renewals went unanswered
// (a loaded machine: TestTenantsComeAndGo) kept its lanes' goroutines
// and its place in Stats for five minutes after the tenant closed it.
func TestClosedClientOfADownEndpointGivesBackItsLanes(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		e := newEnv(t)
		e.rdb.AddHook(hangKeys("k"))
		before := watchdog.LaneGoroutines()
		wd := attach(t, e.reg)
		e.obtain(t, "k1", "me", 300*time.Millisecond)
		// The renewals hang: the lock is lost, the endpoint down.
		time.Sleep(5 * time.Second)
		synctest.Wait()
		st := wd.Stats()
		if len(st.Endpoints) != 1 || !st.Endpoints[0].Down || st.Lost != 1 || st.Tracked != 0 {
			t.Fatalf("Stats() 5 s after the lock's renewals began to hang: %+v, want one endpoint, down, the lock lost and none tracked", st)
		}
		if got := watchdog.LaneGoroutines(); got != before+2 {
			t.Fatalf("%d lane goroutines while the down endpoint is listed, %d before: want its two", got, before)
		}
		_ = e.rdb.Close()
		time.Sleep(3 * time.Second)
		synctest.Wait()
		if st := wd.Stats(); len(st.Endpoints) != 0 {
			t.Errorf("Stats().Endpoints = %+v 3 s after the client was closed, want none", st.Endpoints)
		}
		if got := watchdog.LaneGoroutines(); got != before {
			t.Errorf("%d lane goroutines 3 s after the client was closed, %d before: want none of its lanes'", got, before)
		}
	})
}
