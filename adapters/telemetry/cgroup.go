package telemetry

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Cgroup is the CPU and memory of the cgroup the sidecar runs in (its
// container, when it runs in one), read from cgroup v2 or v1 files.
type Cgroup struct {
	Version     int           // 1 or 2
	MemoryUsage uint64        // bytes charged to the cgroup
	MemoryLimit uint64        // bytes; 0 when unlimited
	CPUUsage    time.Duration // CPU time consumed, cumulative
	CPULimit    float64       // CPUs the quota allows (quota/period); 0 when unlimited
}

// cgroupReader finds the sidecar's own cgroup once (from /proc/self/cgroup)
// and reads its figures on every sample.
type cgroupReader struct {
	version int
	// v2: one directory. v1: one per controller.
	dir, memDir, cpuDir, acctDir string
}

// v1Unlimited: cgroup v1 reports "no limit" as a huge page-aligned value
// (9223372036854771712 on 4 KiB pages); anything from 2^62 up is treated
// as unlimited.
const v1Unlimited = 1 << 62

// newCgroupReader locates the cgroup given the cgroup mount root
// (/sys/fs/cgroup) and the content of /proc/self/cgroup. It returns nil
// when no readable cgroup is found.
func newCgroupReader(root string, selfCgroup []byte) *cgroupReader {
	paths := map[string]string{} // controller ("" for v2) -> path
	sc := bufio.NewScanner(bytes.NewReader(selfCgroup))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			paths[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			paths[c] = parts[2]
		}
	}
	// within returns root/sub/path when it exists, else root/sub: inside a
	// container with its own cgroup namespace (or a v1 bind mount) the
	// cgroup is mounted at the root and the host path does not exist.
	within := func(sub, path string) string {
		base := filepath.Join(root, sub)
		if d := filepath.Join(base, path); path != "" && isDir(d) {
			return d
		}
		if isDir(base) {
			return base
		}
		return ""
	}
	if exists(filepath.Join(root, "cgroup.controllers")) {
		if d := within("", paths[""]); d != "" {
			return &cgroupReader{version: 2, dir: d}
		}
		return nil
	}
	r := &cgroupReader{version: 1}
	if p, ok := paths["memory"]; ok {
		r.memDir = within("memory", p)
	}
	if p, ok := paths["cpu"]; ok {
		for _, sub := range []string{"cpu,cpuacct", "cpu"} {
			if r.cpuDir = within(sub, p); r.cpuDir != "" {
				break
			}
		}
	}
	if p, ok := paths["cpuacct"]; ok {
		for _, sub := range []string{"cpu,cpuacct", "cpuacct"} {
			if r.acctDir = within(sub, p); r.acctDir != "" {
				break
			}
		}
	}
	if r.memDir == "" && r.cpuDir == "" && r.acctDir == "" {
		return nil
	}
	return r
}

// read returns the current figures; ok is false when nothing could be read.
func (r *cgroupReader) read() (c Cgroup, ok bool) {
	c.Version = r.version
	if r.version == 2 {
		usage, e1 := readUint(filepath.Join(r.dir, "memory.current"))
		c.MemoryUsage = usage
		if lim, err := readFileTrim(filepath.Join(r.dir, "memory.max")); err == nil && lim != "max" {
			c.MemoryLimit, _ = strconv.ParseUint(lim, 10, 64)
		}
		if f := fieldsOf(filepath.Join(r.dir, "cpu.max")); len(f) == 2 && f[0] != "max" {
			q, _ := strconv.ParseFloat(f[0], 64)
			p, _ := strconv.ParseFloat(f[1], 64)
			if p > 0 {
				c.CPULimit = q / p
			}
		}
		e2 := os.ErrNotExist
		if b, err := os.ReadFile(filepath.Join(r.dir, "cpu.stat")); err == nil {
			for line := range strings.SplitSeq(string(b), "\n") {
				if v, found := strings.CutPrefix(line, "usage_usec "); found {
					us, _ := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
					c.CPUUsage = time.Duration(us) * time.Microsecond
					e2 = nil
				}
			}
		}
		return c, e1 == nil || e2 == nil
	}
	if r.memDir != "" {
		if v, err := readUint(filepath.Join(r.memDir, "memory.usage_in_bytes")); err == nil {
			c.MemoryUsage, ok = v, true
		}
		if v, err := readUint(filepath.Join(r.memDir, "memory.limit_in_bytes")); err == nil && v < v1Unlimited {
			c.MemoryLimit = v
		}
	}
	if r.cpuDir != "" {
		q, err1 := readFileTrim(filepath.Join(r.cpuDir, "cpu.cfs_quota_us"))
		p, err2 := readUint(filepath.Join(r.cpuDir, "cpu.cfs_period_us"))
		if quota, err := strconv.ParseInt(q, 10, 64); err1 == nil && err2 == nil && err == nil && quota > 0 && p > 0 {
			c.CPULimit = float64(quota) / float64(p)
		}
	}
	if r.acctDir != "" {
		if v, err := readUint(filepath.Join(r.acctDir, "cpuacct.usage")); err == nil {
			c.CPUUsage, ok = time.Duration(v), true
		}
	}
	return c, ok
}

var containerIDPattern = regexp.MustCompile(`[0-9a-f]{64}`)

// containerID finds the container's id in /proc/self/cgroup (docker,
// containerd and CRI-O cgroup paths carry it) or, with a cgroup namespace,
// in /proc/self/mountinfo (the runtime's /containers/ID/ bind mounts).
// "" when none.
func containerID(selfCgroup, mountinfo []byte) string {
	if id := containerIDPattern.Find(selfCgroup); id != nil {
		return string(id)
	}
	sc := bufio.NewScanner(bytes.NewReader(mountinfo))
	sc.Buffer(make([]byte, 0, 4096), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.Index(line, "/containers/"); i >= 0 {
			if id := containerIDPattern.FindString(line[i:]); id != "" {
				return id
			}
		}
	}
	return ""
}

// inContainer reports whether the sidecar runs in a container.
func inContainer(id string) bool {
	if id != "" || os.Getenv("KUBERNETES_SERVICE_HOST") != "" {
		return true
	}
	return exists("/.dockerenv") || exists("/run/.containerenv")
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func readFileTrim(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

func readUint(p string) (uint64, error) {
	s, err := readFileTrim(p)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(s, 10, 64)
}

func fieldsOf(p string) []string {
	s, err := readFileTrim(p)
	if err != nil {
		return nil
	}
	return strings.Fields(s)
}
