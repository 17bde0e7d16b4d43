package testredis

import (
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Kill kills the node at addr with SIGKILL and waits for it to exit.
func (c *Cluster) Kill(t testing.TB, addr string) {
	t.Helper()
	s := c.Server(addr)
	if s == nil {
		t.Fatalf("Kill(%s): no such cluster node", addr)
	}
	s.Kill(t)
}

// WaitPromoted waits until a node other than old serves slot as a master
// on every live node's view, and every live node reports cluster_state:ok;
// it returns the new master's address. It fails t after within.
func (c *Cluster) WaitPromoted(t testing.TB, slot int, old string, within time.Duration) string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		addr, err := c.Promoted(slot, old)
		if err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot %d not served by a new master within %v after %s: %v", slot, within, old, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Promoted is WaitPromoted's check, once: it returns the new master of
// slot, or an error telling what is not there yet.
func (c *Cluster) Promoted(slot int, old string) (string, error) {
	var found string
	for _, s := range c.Servers {
		if s.Addr == old || !s.Running() || s.Paused() {
			continue
		}
		st, err := InfoFieldCluster(s.Addr)
		if err != nil {
			return "", err
		}
		if st != "ok" {
			return "", fmt.Errorf("%s: cluster_state:%s", s.Addr, st)
		}
		nodes, err := c.nodesAt(s.Addr)
		if err != nil {
			return "", err
		}
		owner := ""
		for _, n := range nodes {
			if n.Master && !n.Failed && n.serves(slot) {
				owner = n.Addr
			}
		}
		if owner == "" || owner == old {
			return "", fmt.Errorf("%s sees slot %d served by %q", s.Addr, slot, owner)
		}
		if found != "" && owner != found {
			return "", fmt.Errorf("nodes disagree on slot %d: %s and %s", slot, found, owner)
		}
		found = owner
	}
	if found == "" {
		return "", errors.New("no live node")
	}
	role, err := InfoField(found, "replication", "role")
	if err != nil {
		return "", err
	}
	if role != "master" {
		return "", fmt.Errorf("new owner %s of slot %d reports role:%s", found, slot, role)
	}
	return found, nil
}

// InfoFieldCluster returns cluster_state from CLUSTER INFO on addr.
func InfoFieldCluster(addr string) (string, error) {
	info, err := DoString(addr, "CLUSTER", "INFO")
	if err != nil {
		return "", err
	}
	return infoField(info, "cluster_state"), nil
}

// HalfMigrate starts moving slot from its master to the master at to, and
// leaves it half-way, as a resharding that stopped (or is slow) would:
// the target is set IMPORTING and the source MIGRATING (CLUSTER SETSLOT),
// and the given keys, which must hash to slot, are moved with MIGRATE
// (their values and TTLs travel with them). The source then answers a
// command for a moved key with -ASK, and a command over several keys of
// the slot of which only some are still there with -TRYAGAIN. It returns
// the source's address.
func (c *Cluster) HalfMigrate(t testing.TB, slot int, to string, keys []string) string {
	t.Helper()
	from := c.MasterOf(t, slot)
	if from == to {
		t.Fatalf("HalfMigrate: slot %d is already served by %s", slot, to)
	}
	for _, k := range keys {
		if s := Slot(k); s != slot {
			t.Fatalf("HalfMigrate: key %q hashes to slot %d, not %d", k, s, slot)
		}
	}
	fromID, toID := c.idOf(t, from), c.idOf(t, to)
	s := strconv.Itoa(slot)
	if _, err := Do(to, "CLUSTER", "SETSLOT", s, "IMPORTING", fromID); err != nil {
		t.Fatalf("CLUSTER SETSLOT %s IMPORTING on %s: %v", s, to, err)
	}
	if _, err := Do(from, "CLUSTER", "SETSLOT", s, "MIGRATING", toID); err != nil {
		t.Fatalf("CLUSTER SETSLOT %s MIGRATING on %s: %v", s, from, err)
	}
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(to)
		args := append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)
		if r, err := Do(from, args...); err != nil || r != "OK" {
			t.Fatalf("MIGRATE %d keys of slot %d from %s to %s: reply %v, error %v", len(keys), slot, from, to, r, err)
		}
	}
	return from
}

// Slot returns the hash slot of key (CRC16 of the key, or of its hash tag,
// modulo 16384).
func Slot(key string) int {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			key = key[i+1 : i+1+j]
		}
	}
	return int(crc16(key) % 16384)
}

// crc16 is CRC-16/XMODEM (polynomial 0x1021, initial value 0), the
// checksum Redis Cluster hashes keys with.
func crc16(s string) uint16 {
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc ^= uint16(s[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}
