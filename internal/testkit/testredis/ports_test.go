package testredis

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A reserved port lies below the ephemeral range with its bus port, is
// named by a file of this process until its test ends, and is refused to a
// reservation while a live process holds it; a dead holder's is taken over.
func TestReservePort(t *testing.T) {
	var port int
	t.Run("reserve", func(t *testing.T) {
		var err error
		if port, err = reservePort(t); err != nil {
			t.Fatalf("reservePort: %v", err)
		}
		if low := ephemeralLow(); port+busOffset >= low || port < portLow {
			t.Fatalf("port %d (bus %d) not in [%d, %d)", port, port+busOffset, portLow, low)
		}
		for _, p := range []int{port, port + busOffset} {
			b, err := os.ReadFile(filepath.Join(portDir, strconv.Itoa(p)))
			if err != nil || string(b) != strconv.Itoa(os.Getpid())+"\n" {
				t.Fatalf("reservation of %d: %q, %v; want this process's pid", p, b, err)
			}
			if reserve(p) {
				t.Fatalf("port %d reserved twice", p)
			}
		}
	})
	if _, err := os.Stat(filepath.Join(portDir, strconv.Itoa(port))); err == nil {
		t.Fatalf("port %d still reserved after its test ended", port)
	}
	name := filepath.Join(portDir, strconv.Itoa(port))
	if err := os.WriteFile(name, []byte(strconv.Itoa(os.Getppid())+"\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if reserve(port) {
		t.Errorf("port %d reserved while a live process (%d) holds it", port, os.Getppid())
	}
	if err := os.WriteFile(name, []byte("999999999\n"), 0o666); err != nil {
		t.Fatal(err)
	}
	if !reserve(port) {
		t.Errorf("port %d not taken over from a process that no longer runs", port)
	}
	release(port)
}
