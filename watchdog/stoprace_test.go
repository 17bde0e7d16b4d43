package watchdog

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/lockwatch/lockwatch/registry"
	"github.com/redis/go-redis/v9"
)

// Stop while renewals settle on clients the application has closed: a
// renewal that answers redis.ErrClosed starts a goroutine to check the
// client, and Stop, waiting for the watchdog's goroutines, must neither
// panic ("WaitGroup is reused before previous Wait has returned", seen in
// TestIdleClientsGiveBackTheirLanes's cleanup under -race) nor leave one
// running after it returns.
func TestStopWhileClosedClientsSettle(t *testing.T) {
	m := miniredis.RunT(t)
	ctx := context.Background()
	for round := range 30 {
		reg := registry.New(nxAdapter{})
		w, err := Attach(reg, WithSchedule("@every 1h"))
		if err != nil {
			t.Fatal(err)
		}
		var clients []*redis.Client
		for i := range 20 {
			c := redis.NewClient(&redis.Options{Addr: m.Addr()})
			if err := reg.Watch(c); err != nil {
				t.Fatal(err)
			}
			if !c.SetNX(ctx, fmt.Sprintf("stop:%d:%d", round, i), "v", 30*time.Millisecond).Val() {
				t.Fatalf("SET NX failed")
			}
			clients = append(clients, c)
		}
		time.Sleep(time.Duration(round%10) * time.Millisecond)
		for _, c := range clients {
			_ = c.Close()
		}
		time.Sleep(time.Duration(round%7) * time.Millisecond)
		w.Stop()
	}
}
