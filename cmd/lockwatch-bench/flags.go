package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
)

type config struct {
	redis   string
	full    bool
	asJSON  bool
	sweeps  int
	locks   []int
	impls   []string
	fault   bool
	hookRun int
	// child and n are -child and -n: run one case in this process.
	child string
	n     int
	// memory runs the memory case at memLocks.
	memory   bool
	memLocks []int
	// cluster runs the cluster case at clusterLocks.
	cluster      bool
	clusterLocks int
	// neighbour, clients and storm run those cases (-cases).
	neighbour, clients, storm bool
}

// parseArgs parses and checks the command line.
func parseArgs(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("lockwatch-bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	lists := defineFlags(fs, &cfg)
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if err := checkFlags(cfg); err != nil {
		return cfg, err
	}
	var err error
	if cfg.locks, err = parseLocks(*lists.locks, cfg.full); err != nil {
		return cfg, err
	}
	if cfg.memLocks, err = parseCounts("-memory-locks", *lists.memLocks, []int{20_000, 100_000}, cfg.full); err != nil {
		return cfg, err
	}
	if err := cfg.parseCases(*lists.cases); err != nil {
		return cfg, err
	}
	// -cases naming only neighbour, clients and storm runs those alone: the
	// cluster and fault cases run then only when asked for by name.
	if len(cfg.impls) == 0 && !cfg.memory {
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		cfg.cluster = cfg.cluster && set["cluster"]
		cfg.fault = cfg.fault && set["fault"]
	}
	return cfg, nil
}

// listFlags are the comma-separated flags, parsed once fs.Parse is done.
type listFlags struct {
	locks, cases, memLocks *string
}

// defineFlags defines the command's flags on fs: into cfg, into the
// package's variables of the memory, per-lock, neighbour and clients
// cases, and the lists it returns.
func defineFlags(fs *flag.FlagSet, cfg *config) listFlags {
	lists := listFlags{
		locks: fs.String("locks", "", "comma-separated lock counts (default 1000,10000,100000, and 1000000 with -full)"),
		cases: fs.String("cases", strings.Join(append(caseOrder[:len(caseOrder):len(caseOrder)], "memory"), ","),
			"comma-separated cases to run: sweep cases "+strings.Join(caseOrder, ", ")+", and memory (see -memory-locks); not by default: neighbour (the application's latency during sweeps, see -neighbour-*), clients (cost per watched client, see -clients) and storm (short locks obtained and released in waves, see -storm-*)"),
		memLocks: fs.String("memory-locks", "", "comma-separated lock counts of the memory case (default 20000,100000, and 1000000 with -full)"),
	}
	fs.StringVar(&cfg.child, "child", "", "internal: run one case in this process and print its result as JSON")
	fs.IntVar(&cfg.n, "n", 0, "internal: lock count of -child")
	fs.StringVar(&cfg.redis, "redis", "", "host:port of a redis-server to use (default: start one on a free loopback port)")
	fs.BoolVar(&cfg.full, "full", false, "also measure 1M locks")
	fs.BoolVar(&cfg.asJSON, "json", false, "print one JSON object on stdout instead of a table")
	fs.IntVar(&cfg.sweeps, "sweeps", 5, "measured sweeps per case (the median is reported)")
	fs.BoolVar(&cfg.fault, "fault", true, "also measure fault isolation: one failing chunk in a sweep")
	fs.IntVar(&cfg.hookRun, "hook-rounds", 15, "rounds of the hook overhead measurement")
	fs.BoolVar(&cfg.cluster, "cluster", true, "also measure a sweep on a 3-master Redis Cluster the command starts on loopback (needs redis-server and redis-cli on PATH, even with -redis)")
	fs.IntVar(&cfg.clusterLocks, "cluster-locks", 100_000, "lock count of the cluster case")
	fs.DurationVar(&memoryEvery, "memory-every", defaultMemoryEvery, "the memory case's watched process sweeps on \"@every\" this period")
	fs.DurationVar(&perLockPoolTimeout, "per-lock-pool-timeout", defaultPerLockPoolTimeout,
		"PoolTimeout of the per-lock case's client; with a short one (go-redis's default is 4s) refreshes that wait longer fail and are counted instead of ending the run")
	d := defaultNeighbour
	fs.IntVar(&neighbour.locks, "neighbour-locks", d.locks, "lock count of the neighbour case")
	fs.StringVar(&neighbour.schedule, "neighbour-schedule", d.schedule, "the neighbour case's watchdog schedule (watchdog.WithSchedule)")
	fs.DurationVar(&neighbour.duration, "neighbour-duration", d.duration, "measured time of the neighbour case per pool configuration, both modes together")
	fs.DurationVar(&neighbour.block, "neighbour-block", d.block, "length of one block of the neighbour case (the watchdog is attached or stopped between blocks); at most 10s, so that the 30 s locks survive two blocks without lockwatch")
	fs.DurationVar(&neighbour.interval, "neighbour-interval", d.interval,
		"a command of each of the neighbour case's streams is due every interval, sent on a goroutine of its own and timed from when it was due, so that commands sample sweeps as evenly as the rest (0: each stream one goroutine sending back to back, each command timed alone)")
	fs.IntVar(&clientsCount, "clients", defaultClients, "number of go-redis clients of the clients case")
	fs.IntVar(&valueBytes, "value-bytes", 0,
		"length of every lock value of the neighbour and storm cases, bytes: redislock's token and Options.Metadata padding, or a redsync value from WithGenValueFunc (0: the libraries' own, 22 and 24 bytes)")
	defineStormFlags(fs)
	return lists
}

// defineStormFlags defines the -storm-* flags.
func defineStormFlags(fs *flag.FlagSet) {
	d := defaultStorm
	fs.IntVar(&storm.locks, "storm-locks", d.locks, "lock count of the storm case")
	fs.DurationVar(&storm.ttl, "storm-ttl", d.ttl, "TTL of the storm case's locks")
	fs.StringVar(&storm.lib, "storm-lib", d.lib, "library of the storm case's locks: redislock or redsync")
	fs.DurationVar(&storm.duration, "storm-duration", d.duration, "length of each storm run, from the burst's start")
	fs.DurationVar(&storm.wave, "storm-wave", d.wave, "a third of the storm's locks is released and obtained again every this period")
	fs.DurationVar(&storm.poll, "storm-poll", d.poll, "the storm's poller reads every held lock's key every this period, through a client nothing watches (0: no poller)")
	fs.IntVar(&storm.rounds, "storm-rounds", d.rounds, "rounds of the storm case: each pool configuration runs with and without lockwatch once a round, and its p99 rise is the median of its rounds'")
	fs.StringVar(&storm.profile, "storm-profile", d.profile, "directory to write a CPU profile of each storm run to (storm-<lib>-<mode>-<pool>.pprof; a later round's replaces an earlier one's)")
}

// checkFlags checks the numeric flags and the neighbour case's, in the
// order of their errors.
func checkFlags(cfg config) error {
	if cfg.sweeps < 1 {
		return fmt.Errorf("-sweeps %d: need at least 1", cfg.sweeps)
	}
	if perLockPoolTimeout <= 0 {
		return fmt.Errorf("-per-lock-pool-timeout %v: need a positive duration", perLockPoolTimeout)
	}
	if cfg.hookRun < 1 {
		return fmt.Errorf("-hook-rounds %d: need at least 1", cfg.hookRun)
	}
	if cfg.clusterLocks < 1 {
		return fmt.Errorf("-cluster-locks %d: need a positive lock count", cfg.clusterLocks)
	}
	if err := checkNeighbourFlags(); err != nil {
		return err
	}
	if clientsCount < 1 {
		return fmt.Errorf("-clients %d: need a positive number of clients", clientsCount)
	}
	if err := checkStormFlags(); err != nil {
		return err
	}
	if memoryEvery < time.Millisecond {
		return fmt.Errorf("-memory-every %v: need at least 1ms", memoryEvery)
	}
	return nil
}

// checkNeighbourFlags checks the -neighbour-* flags.
func checkNeighbourFlags() error {
	if neighbour.locks < 1 {
		return fmt.Errorf("-neighbour-locks %d: need a positive lock count", neighbour.locks)
	}
	if neighbour.schedule == "" {
		return errors.New("-neighbour-schedule: need a schedule")
	}
	if neighbour.block < 2*neighbourSettle || neighbour.block > neighbourTTL/3 {
		return fmt.Errorf("-neighbour-block %v: need between %v and %v", neighbour.block, 2*neighbourSettle, neighbourTTL/3)
	}
	if neighbour.duration < neighbour.block {
		return fmt.Errorf("-neighbour-duration %v: need at least one block (-neighbour-block %v)", neighbour.duration, neighbour.block)
	}
	if neighbour.interval < 0 {
		return fmt.Errorf("-neighbour-interval %v: need 0 or more", neighbour.interval)
	}
	return nil
}

// parseCases sets cfg's cases from -cases: the sweep cases in impls, the
// others' switches.
func (cfg *config) parseCases(list string) error {
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		switch name {
		case "memory":
			cfg.memory = true
			continue
		case "neighbour":
			cfg.neighbour = true
			continue
		case "clients":
			cfg.clients = true
			continue
		case "storm":
			cfg.storm = true
			continue
		}
		if _, ok := cases[name]; !ok {
			return fmt.Errorf("-cases: unknown case %q (known: %s, memory, neighbour, clients, storm)", name, strings.Join(caseOrder, ", "))
		}
		cfg.impls = append(cfg.impls, name)
	}
	return nil
}

func parseLocks(s string, full bool) ([]int, error) {
	return parseCounts("-locks", s, []int{1_000, 10_000, 100_000}, full)
}

// parseCounts parses flag's comma-separated lock counts s; when s is
// empty, it returns def, and with full a million more.
func parseCounts(flag, s string, def []int, full bool) ([]int, error) {
	if s == "" {
		out := slices.Clone(def)
		if full {
			out = append(out, 1_000_000)
		}
		return out, nil
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v < 1 {
			return nil, fmt.Errorf("%s: %q is not a positive number", flag, f)
		}
		out = append(out, v)
	}
	return out, nil
}
