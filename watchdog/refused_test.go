package watchdog_test

import (
	"context"
	"errors"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/lockwatch/lockwatch/watchdog"
)

// A server killed while a renewal waits on a connection that stays silent
// (the renewal and its hedge get no answer), while new connections are
// refused, but only after a round trip (here 100 ms): the lock given up
// names the refusal, the latest word on the endpoint, not only the missing
// answer. The watchdog tries a dial when it hedges the renewal, the lane
// not yet down, and again when it gives the hedge up; the lock is given up
// 83 ms after that, before the second dial's refusal comes back. Fails
// when the first dial's refusal is dropped because the lane was not down.
func TestKilledServerLossNamesTheRefusal(t *testing.T) {
	watchdog.Bubble(t, func(t *testing.T) {
		var killed atomic.Bool
		e := newEnvDialing(t, func(inMemory dialer) dialer {
			return func(ctx context.Context, network, addr string) (net.Conn, error) {
				if killed.Load() {
					time.Sleep(100 * time.Millisecond)
					return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
				}
				return inMemory(ctx, network, addr)
			}
		})
		// The kill: from then on every renew call hangs until its
		// context ends (its connection is silent), and dials are refused.
		e.rdb.AddHook(gate(func(ctx context.Context, cmds ...redis.Cmder) error {
			if _, n := renewKeys(cmds); n == 0 || !killed.Load() {
				return nil
			}
			<-ctx.Done()
			return ctx.Err()
		}))
		lost := &lossLog{}
		wd := attach(t, e.reg, watchdog.WithOnLost(lost.onLost))
		defer wd.Stop()
		const ttl = time.Second
		e.obtain(t, "k", "me", ttl)
		time.Sleep(2 * ttl) // renewed in steady state
		synctest.Wait()
		if keys, _ := lost.get(); len(keys) > 0 {
			t.Fatalf("OnLost before the kill: %v", keys)
		}
		killed.Store(true)
		time.Sleep(3 * ttl)
		synctest.Wait()
		keys, errs := lost.get()
		if len(keys) != 1 {
			t.Fatalf("OnLost: %v, want k given up once within 3 TTLs of the kill; stats %+v", keys, wd.Stats())
		}
		if !errors.Is(errs[0], watchdog.ErrUnreachable) || !errors.Is(errs[0], syscall.ECONNREFUSED) {
			t.Errorf("k lost with %v, want ErrUnreachable wrapping the refused dial (ECONNREFUSED)", errs[0])
		}
		if st := wd.Stats(); st.Hedges == 0 {
			t.Errorf("Stats().Hedges = 0, want the silent renewal hedged (the scenario did not happen); stats %+v", st)
		}
	})
}
