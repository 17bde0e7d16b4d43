package testredis

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterOptions configures [StartCluster].
type ClusterOptions struct {
	// Masters is the number of masters; the default and the least is 3.
	Masters int
	// Replicas is the number of replicas of each master; the default is 0.
	Replicas int
	// NodeTimeout is cluster-node-timeout: how long a node may be
	// unreachable before it is flagged as failing, and so roughly how long
	// a replica takes to be promoted after its master dies (a replica
	// then waits half a second and a random half second more before it
	// asks for votes). The default is Redis's, 15 s.
	NodeTimeout time.Duration
	// NoFullCoverage sets cluster-require-full-coverage no: the masters
	// that still serve their slots keep answering while another shard has
	// no master. Redis's default (yes) makes every node answer CLUSTERDOWN
	// to every command from the moment a master is flagged as failed until
	// its replica is promoted.
	NoFullCoverage bool
}

// Cluster is a Redis Cluster of real redis-server processes, each a
// [Server] with its own port and directory, created with
// redis-cli --cluster create. Every process is killed by pid at cleanup.
type Cluster struct {
	// Servers are all the nodes, in the order they were started.
	Servers []*Server
	opts    ClusterOptions
}

// ClusterStartTimeout bounds how long [StartCluster] waits for the cluster
// to be formed and every replica to be in sync.
const ClusterStartTimeout = 60 * time.Second

// StartCluster starts Masters*(1+Replicas) cluster-enabled servers on free
// loopback ports, creates the cluster with redis-cli --cluster create, and
// returns once every node reports cluster_state:ok, knows every other node
// and agrees on the slot map, and every replica's link to its master is up.
// Like [Start], it skips t without redis-server (or redis-cli), unless
// LOCKWATCH_REQUIRE_REDIS=1.
func StartCluster(t testing.TB, o ClusterOptions) *Cluster {
	t.Helper()
	cli := lookCLI(t)
	if o.Masters == 0 {
		o.Masters = 3
	}
	if o.Masters < 3 {
		t.Fatalf("StartCluster: %d masters; redis-cli --cluster create needs at least 3", o.Masters)
	}
	if o.Replicas < 0 {
		t.Fatalf("StartCluster: %d replicas per master, want 0 or more", o.Replicas)
	}
	// A diskless full sync waits 5 s by default for more replicas to join.
	// Notice level: each node's output then records what the cluster
	// did (a node marked failing, an election won, a master demoted),
	// for a failed test to print (see [Cluster.Events]).
	args := []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--repl-diskless-sync-delay", "0", "--loglevel", "notice"}
	if o.NodeTimeout > 0 {
		args = append(args, "--cluster-node-timeout", strconv.FormatInt(o.NodeTimeout.Milliseconds(), 10))
	}
	if o.NoFullCoverage {
		args = append(args, "--cluster-require-full-coverage", "no")
	}
	c := &Cluster{opts: o}
	n := o.Masters * (1 + o.Replicas)
	create := []string{"--cluster", "create"}
	for range n {
		s := StartWith(t, Options{Args: args})
		c.Servers = append(c.Servers, s)
		create = append(create, s.Addr)
	}
	create = append(create, "--cluster-replicas", strconv.Itoa(o.Replicas), "--cluster-yes")
	cmd := exec.Command(cli, create...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %s: %v\n%s", strings.Join(create, " "), err, out)
	}
	if err := c.waitFormed(time.Now().Add(ClusterStartTimeout)); err != nil {
		t.Fatalf("cluster of %d nodes not ready within %v: %v\nredis-cli output:\n%s", n, ClusterStartTimeout, err, out)
	}
	return c
}

// lookCLI finds redis-cli on PATH, skipping or failing t as [Start] does.
func lookCLI(t testing.TB) string {
	t.Helper()
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv(RequireEnv) == "1" {
			t.Fatalf("redis-cli not found on PATH (%v) and %s=1", err, RequireEnv)
		}
		t.Skipf("redis-cli not found on PATH (%v); set %s=1 to fail instead", err, RequireEnv)
	}
	return cli
}

// waitFormed polls every node until the cluster is whole (see StartCluster).
func (c *Cluster) waitFormed(deadline time.Time) error {
	n := len(c.Servers)
	for {
		err := c.formed(n)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (c *Cluster) formed(n int) error {
	var ref string
	for _, s := range c.Servers {
		info, err := DoString(s.Addr, "CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", s.Addr, err)
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", s.Addr, st)
		}
		if k := infoField(info, "cluster_known_nodes"); k != strconv.Itoa(n) {
			return fmt.Errorf("%s: cluster_known_nodes:%s, want %d", s.Addr, k, n)
		}
		nodes, err := c.nodesAt(s.Addr)
		if err != nil {
			return err
		}
		var masters, replicas int
		var view []string
		for _, nd := range nodes {
			if nd.Master {
				masters++
				view = append(view, fmt.Sprint(nd.Addr, nd.Slots))
			} else {
				replicas++
			}
		}
		if masters != c.opts.Masters || replicas != c.opts.Masters*c.opts.Replicas {
			return fmt.Errorf("%s sees %d masters and %d replicas, want %d and %d", s.Addr, masters, replicas, c.opts.Masters, c.opts.Masters*c.opts.Replicas)
		}
		// Every node must see the same slot map.
		sortStrings(view)
		v := strings.Join(view, " ")
		if ref == "" {
			ref = v
		} else if v != ref {
			return fmt.Errorf("%s sees slots %s, another node %s", s.Addr, v, ref)
		}
		role, err := InfoField(s.Addr, "replication", "role")
		if err != nil {
			return err
		}
		if role == "slave" {
			if st, _ := InfoField(s.Addr, "replication", "master_link_status"); st != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", s.Addr, st)
			}
		}
	}
	return nil
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// Addrs returns every node's address, for redis.ClusterOptions.Addrs.
func (c *Cluster) Addrs() []string {
	out := make([]string, len(c.Servers))
	for i, s := range c.Servers {
		out[i] = s.Addr
	}
	return out
}

// Server returns the node at addr, or nil.
func (c *Cluster) Server(addr string) *Server {
	for _, s := range c.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// clusterEvent matches the lines of a node's output at notice level that
// say what the cluster did: failure detection, elections, promotions and
// demotions, the cluster's state.
var clusterEvent = regexp.MustCompile(`(?i)marking node|fail message|clear fail|failover|election|cluster state changed|connection with master lost|secondary replication id|configuration change detected|turning into a replica`)

// Events returns, for each node in start order, the lines of its output
// that say what the cluster did (nodes marked failing or cleared,
// elections, promotions, state changes), each prefixed with the node's
// address, for a failed test to log.
func (c *Cluster) Events() []string {
	var out []string
	for _, s := range c.Servers {
		for line := range strings.SplitSeq(s.Output(), "\n") {
			if clusterEvent.MatchString(line) {
				out = append(out, s.Addr+": "+line)
			}
		}
	}
	return out
}

// ClusterNode is one line of CLUSTER NODES.
type ClusterNode struct {
	ID       string
	Addr     string // "127.0.0.1:port"
	Master   bool
	MasterID string // a replica's master; "" for a master
	Failed   bool   // flagged fail or fail? by the node asked
	Slots    [][2]int
}

// Nodes returns the cluster as a live node sees it (CLUSTER NODES on the
// first node that runs, is not paused and answers).
func (c *Cluster) Nodes(t testing.TB) []ClusterNode {
	t.Helper()
	var errs []error
	for _, s := range c.Servers {
		if !s.Running() || s.Paused() {
			continue
		}
		nodes, err := c.nodesAt(s.Addr)
		if err == nil {
			return nodes
		}
		errs = append(errs, err)
	}
	t.Fatalf("no live cluster node answered CLUSTER NODES: %v", errors.Join(errs...))
	return nil
}

func (c *Cluster) nodesAt(addr string) ([]ClusterNode, error) {
	text, err := DoString(addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, fmt.Errorf("CLUSTER NODES on %s: %w", addr, err)
	}
	return parseNodes(text)
}

// parseNodes parses the reply of CLUSTER NODES.
func parseNodes(text string) ([]ClusterNode, error) {
	var out []ClusterNode
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("CLUSTER NODES line %q: too few fields", line)
		}
		addr, _, _ := strings.Cut(f[1], "@")
		addr, _, _ = strings.Cut(addr, ",")
		n := ClusterNode{ID: f[0], Addr: addr}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "master":
				n.Master = true
			case "fail", "fail?":
				n.Failed = true
			}
		}
		if f[3] != "-" {
			n.MasterID = f[3]
		}
		for _, r := range f[8:] {
			if strings.HasPrefix(r, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, ok := strings.Cut(r, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("CLUSTER NODES line %q: bad slot range %q", line, r)
			}
			n.Slots = append(n.Slots, [2]int{a, b})
		}
		out = append(out, n)
	}
	return out, nil
}

// serves reports whether n serves slot.
func (n ClusterNode) serves(slot int) bool {
	for _, r := range n.Slots {
		if slot >= r[0] && slot <= r[1] {
			return true
		}
	}
	return false
}

// MasterOf returns the address of the master that serves slot, as a live
// node sees it.
func (c *Cluster) MasterOf(t testing.TB, slot int) string {
	t.Helper()
	for _, n := range c.Nodes(t) {
		if n.Master && n.serves(slot) {
			return n.Addr
		}
	}
	t.Fatalf("no master serves slot %d", slot)
	return ""
}

// Masters returns the addresses of the masters that serve slots, as a live
// node sees them.
func (c *Cluster) Masters(t testing.TB) []string {
	t.Helper()
	var out []string
	for _, n := range c.Nodes(t) {
		if n.Master && len(n.Slots) > 0 {
			out = append(out, n.Addr)
		}
	}
	return out
}

// ReplicasOf returns the addresses of master's replicas.
func (c *Cluster) ReplicasOf(t testing.TB, master string) []string {
	t.Helper()
	nodes := c.Nodes(t)
	var id string
	for _, n := range nodes {
		if n.Addr == master {
			id = n.ID
		}
	}
	var out []string
	for _, n := range nodes {
		if id != "" && n.MasterID == id {
			out = append(out, n.Addr)
		}
	}
	return out
}

func (c *Cluster) idOf(t testing.TB, addr string) string {
	t.Helper()
	for _, n := range c.Nodes(t) {
		if n.Addr == addr {
			return n.ID
		}
	}
	t.Fatalf("no cluster node at %s", addr)
	return ""
}
