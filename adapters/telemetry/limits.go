package telemetry

import "time"

// Bounds of the telemetry adapter. Each one caps something that grows with
// the machine (mounts, interfaces, processes) or with the peer (log
// subscribers reading slowly), so one batch and one ring stay bounded.
const (
	// maxDevices caps the disks, mounts and network interfaces reported in
	// one batch (each): a machine with thousands of veth interfaces or
	// bind mounts would otherwise make every batch megabytes. Past it the
	// rest are left out of the batch (sorted by name, so the same ones).
	maxDevices = 64

	// mountsRefresh is how often the list of mounts and block devices is
	// read again (/proc/self/mountinfo, /sys/block): mounts change rarely
	// and reading them costs more than the usage figures themselves.
	mountsRefresh = 30 * time.Second

	// processesRefresh is how often /proc is scanned for the process count
	// by state: one read of /proc/PID/stat per process (about 1 ms for 100
	// processes), too much for every 1 s sample on a busy machine.
	processesRefresh = 10 * time.Second

	// LogRingRecords bounds the ring of log records waiting for log
	// subscribers. A subscriber that falls further behind misses the
	// oldest records (counted in Ring.Dropped); nothing else waits for it.
	LogRingRecords = 1024

	// maxLogRecordsPerBatch caps the records in one otlp/exportLogs
	// message, so a burst becomes several messages of bounded size.
	maxLogRecordsPerBatch = 128

	// maxLogValueBytes truncates one log attribute value or message.
	maxLogValueBytes = 4096
)
