package watchdog

import "time"

// SetLagFloor makes every scheduler count a lag of at least d, as if its
// process ran that late, until the returned function is called; w's
// schedulers run at once, as a late wake runs them (a scheduler learns
// its lag when it runs).
func (w *Watchdog) SetLagFloor(d time.Duration) (restore func()) {
	lagFloor.Store(int64(d))
	if v := w.view.Load(); v != nil {
		for _, c := range *v {
			for _, l := range c.allLanes() {
				l.kickDue()
			}
		}
	}
	return func() { lagFloor.Store(0) }
}

// WakeLag returns what w's wake probe measured lately.
func (w *Watchdog) WakeLag() time.Duration { return time.Duration(w.wakeLag.Load()) }
