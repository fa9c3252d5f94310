// Command sidecar is the sidecar daemon (sidecar serve) and its client
// (run, attach, ls, forward, token, cert): terminals and localhost TCP
// ports of a remote machine over the Agent Host Protocol with windowed
// delivery.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/sidecar-dev/sidecar/host"
)

// version is set at build time (-ldflags "-X main.version=...").
var version = "dev"

// exitError carries a process exit status through cobra.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitNotFound is the exit status of kill and attach when a terminal
// given is not on the host: 4, as systemctl exits for a unit it does not
// know. It is apart from 255 (the connection failed, or another error),
// 2 (a usage error) and 1 (a local failure: serve's listener, forward's
// port), so a script can tell "gone" from "could not ask"; like every
// status of sidecar's own it comes with a "sidecar:" line saying why
// (README.md, "Exit status").
const exitNotFound = 4

// usageErrors makes every usage error (a flag, the arguments) exit 2,
// with a pointer to the command's help.
func usageErrors(root *cobra.Command) {
	usage := func(c *cobra.Command, err error) error {
		return &exitError{code: 2, err: fmt.Errorf("%v (see %s --help)", err, c.CommandPath())}
	}
	root.SetFlagErrorFunc(usage)
	for _, c := range root.Commands() {
		if check := c.Args; check != nil {
			c.Args = func(c *cobra.Command, a []string) error {
				if err := check(c, a); err != nil {
					return usage(c, err)
				}
				return nil
			}
		}
	}
}

// unknownCommand makes cobra's error for an unknown command (sidecar bogus),
// which it returns from ran, the root, a usage error as the others are:
// exit 2, one line with the closest command names and the pointer to the
// help. Any other error is returned as is.
func unknownCommand(ran *cobra.Command, err error) error {
	if ran == nil || ran.HasParent() || !strings.HasPrefix(err.Error(), "unknown command ") {
		return err
	}
	// cobra's suggestions follow on lines of their own, one tab in:
	// "\n\nDid you mean this?\n\tls\n".
	lines := strings.Split(err.Error(), "\n")
	msg := lines[0]
	var names []string
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "\t") {
			names = append(names, strings.TrimSpace(l))
		}
	}
	if len(names) > 0 {
		msg += "; did you mean " + strings.Join(names, " or ") + "?"
	}
	return &exitError{code: 2, err: fmt.Errorf("%s (see %s --help)", msg, ran.CommandPath())}
}

// survivePipes keeps the named long-running commands alive when their
// stdout or stderr is a pipe whose reader has gone (`sidecar serve 2>&1 |
// head`, or `| grep -m1 forwarding` to wait for readiness): Go's default is
// to die of SIGPIPE at the next log line, which for forward cut its
// transfers short without a reset, so that they looked complete. Once
// SIGPIPE is notified (not ignored, which children such as a terminal's
// shell would inherit), such a write fails with EPIPE and the line is lost,
// nothing else. The other commands keep the default: `sidecar ls | head`
// ends quietly.
func survivePipes(root *cobra.Command, names ...string) {
	for _, c := range root.Commands() {
		if run := c.RunE; run != nil && slices.Contains(names, c.Name()) {
			c.RunE = func(c *cobra.Command, args []string) error {
				pipeErrorsNotSignals()
				return run(c, args)
			}
		}
	}
}

// pipeErrorsNotSignals makes a write to a pipe whose reader has gone fail
// with EPIPE instead of raising SIGPIPE, on every file descriptor:
// SIGPIPE is notified (to a channel nobody reads), not ignored, so that
// children do not inherit an ignored SIGPIPE.
func pipeErrorsNotSignals() {
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
}

// setGCPercent makes the garbage collector run after percent of heap
// growth (GOGC) unless $GOGC is set to something: serve and forward allocate little per
// byte they move, and a lower GOGC lowers Go's smallest heap goal (4 MB at
// 100) that most of their memory for a few stalled connections was.
func setGCPercent(percent int) {
	if os.Getenv("GOGC") == "" { // unset or empty, which Go reads as 100
		debug.SetGCPercent(percent)
	}
}

func main() {
	host.Version = version
	root := &cobra.Command{
		Use:           "sidecar",
		Short:         "Terminals and localhost ports of this machine, flow-controlled, for remote clients",
		Long:          "sidecar runs beside a workload (sidecar serve) and is the client people use to reach it\n(sidecar attach, run, ls, forward). It speaks the Agent Host Protocol with windowed delivery.",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(serveCmd(), runCmd(), attachCmd(), lsCmd(), tokenCmd(), certCmd(), forwardCmd(), cpCmd(), connectCmd(), stdioCmd(), topCmd(), killCmd(), logsCmd(), shareCmd())
	usageErrors(root)
	survivePipes(root, "serve", "forward", "connect")
	stopProfile := startProfile()
	ran, err := root.ExecuteC()
	stopProfile()
	if err == nil {
		return
	}
	err = unknownCommand(ran, err)
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			fmt.Fprintln(os.Stderr, "sidecar:", ee.err)
		}
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "sidecar:", err)
	os.Exit(1)
}

// startProfile writes a CPU profile of the whole run to $SIDECAR_CPUPROFILE
// and a heap profile at its end (allocations over the run included:
// -sample_index=alloc_space) to $SIDECAR_MEMPROFILE when they are set (for
// benchmarks: go tool pprof bin/sidecar FILE), and returns what stops them.
func startProfile() func() {
	stopCPU := startCPUProfile()
	path := os.Getenv("SIDECAR_MEMPROFILE")
	if path == "" {
		return stopCPU
	}
	return func() {
		stopCPU()
		f, err := os.Create(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, "sidecar: SIDECAR_MEMPROFILE:", err)
			return
		}
		defer f.Close()
		if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
			fmt.Fprintln(os.Stderr, "sidecar: SIDECAR_MEMPROFILE:", err)
		}
	}
}

func startCPUProfile() func() {
	path := os.Getenv("SIDECAR_CPUPROFILE")
	if path == "" {
		return func() {}
	}
	f, err := os.Create(path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "sidecar: SIDECAR_CPUPROFILE:", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		fmt.Fprintln(os.Stderr, "sidecar: SIDECAR_CPUPROFILE:", err)
		_ = f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		_ = f.Close()
	}
}
