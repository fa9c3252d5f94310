package delivery

import "time"

// bdpEstimator keeps a sender's in-flight data near what the path needs,
// below the negotiated window when the window is larger than that.
//
// A window only bounds memory. On a slow link a full window of one busy
// subscription waits in the link's queue, and every other subscription's
// next message waits behind it (DESIGN.md §2: "what waits below the
// scheduler must stay small too"). Like BBR, the estimator measures the
// delivery rate (bytes credited per second) and the minimum round trip
// (send to credit), and caps what is outstanding at gain × rate × minRTT:
// enough to keep the path busy, little queued in it. When the path could
// take more, the rate it measures grows with the cap, so throughput is
// never held down for long. Until it has measurements, it imposes nothing.
//
// It is pure accounting: no goroutines, no clock of its own (now is passed
// in), not safe for concurrent use (the Stream's lock guards it).
type bdpEstimator struct {
	marks    [bdpMarks]bdpMark // ring of send marks
	head, n  int
	minRTT   time.Duration
	minRTTAt time.Time
	maxRate  float64 // UTF-16 bytes per second
	maxAt    time.Time
}

type bdpMark struct {
	sent     UTF16Bytes // sentBytes after this message or fragment
	consumed UTF16Bytes // consumedBytes when it was sent
	at       time.Time
}

const (
	// bdpMarks bounds the send marks kept; when full, the oldest is
	// dropped (fewer samples, never wrong ones).
	bdpMarks = 64
	// bdpGain is the cap over the estimated bandwidth-delay product:
	// room for jitter and for the rate to grow.
	bdpGain = 1.5
	// bdpFloor is the least the cap allows: a few frames, so short round
	// trips (loopback) never starve a stream.
	bdpFloor UTF16Bytes = 64 << 10
	// bdpMinRTTWindow and bdpRateWindow age the filters, so a path that
	// changes is re-measured.
	bdpMinRTTWindow = 10 * time.Second
	bdpRateWindow   = 2 * time.Second
	// bdpFrameTime bounds how long one frame occupies the path at the
	// measured rate: a message of another stream waits behind at most
	// that much of this one's (a 512 KiB frame, 256 KiB of base64, is
	// 84 ms at 25 Mbit/s). 4 ms leaves the largest frames (512 KiB)
	// wherever the rate exceeds 128 MB/s (64 MB/s of base64: loopback), so
	// that a path the CPU limits does not shrink its own frames.
	bdpFrameTime = 4 * time.Millisecond
	// bdpMinFrame is the least frame size the path bound asks for (the
	// default maximumFrameBytes of a TCP channel).
	bdpMinFrame UTF16Bytes = 16 << 10
	// bdpLongRTT is the least round trip at which frames are sized to
	// the path: a link with some latency (a LAN or loopback is well under).
	bdpLongRTT = 5 * time.Millisecond
)

// sent records a data message or fragment: sentBytes and consumedBytes
// after it was debited.
func (e *bdpEstimator) sent(sent, consumed UTF16Bytes, now time.Time) {
	i := (e.head + e.n) % bdpMarks
	if e.n == bdpMarks {
		e.head = (e.head + 1) % bdpMarks
		e.n--
	}
	e.marks[i] = bdpMark{sent: sent, consumed: consumed, at: now}
	e.n++
}

// credited takes a new cumulative consumedBytes: each mark it covers gives
// a round-trip sample and a delivery-rate sample.
func (e *bdpEstimator) credited(consumed UTF16Bytes, now time.Time) {
	for e.n > 0 {
		m := e.marks[e.head]
		if m.sent > consumed {
			break
		}
		e.head = (e.head + 1) % bdpMarks
		e.n--
		rtt := now.Sub(m.at)
		if rtt <= 0 {
			continue
		}
		if e.minRTT == 0 || rtt <= e.minRTT || now.Sub(e.minRTTAt) > bdpMinRTTWindow {
			e.minRTT, e.minRTTAt = rtt, now
		}
		rate := float64(consumed-m.consumed) / rtt.Seconds()
		if rate >= e.maxRate || now.Sub(e.maxAt) > bdpRateWindow {
			e.maxRate, e.maxAt = rate, now
		}
	}
}

// limit returns the cap on outstanding bytes, or 0 when there is none yet.
func (e *bdpEstimator) limit() UTF16Bytes {
	if e.minRTT == 0 || e.maxRate == 0 {
		return 0
	}
	c := UTF16Bytes(bdpGain * e.maxRate * e.minRTT.Seconds())
	return max(c, bdpFloor)
}

// frameLimit returns the frame size that keeps a frame within bdpFrameTime
// of the path at the measured rate (never below bdpMinFrame), or 0 when
// there is no measurement yet or the round trip is under bdpLongRTT: there
// the CPU, not a link, is what a frame waits for (on loopback smaller
// frames cost a fifth of the throughput and shorten no wait).
func (e *bdpEstimator) frameLimit() UTF16Bytes {
	if e.maxRate == 0 || e.minRTT < bdpLongRTT {
		return 0
	}
	return max(UTF16Bytes(e.maxRate*bdpFrameTime.Seconds()), bdpMinFrame)
}
