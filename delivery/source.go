package delivery

// Source produces the data messages of one windowed subscription, pulled by
// the Scheduler only when the subscription can start a message (seed 000
// "When the Window Is Full": the adapter never queues without bound).
//
// Next returns the next complete data message, or the zero Message when
// none is ready; it must not block. When a Source that had nothing later
// has data it calls Stream.Wake. Next is called from the connection's
// writer goroutine only.
type Source interface {
	Next() Message
}

// Attacher is a Source that learns of new data on its own (a journal
// listener) and wakes its Stream then: AddStream calls Attach once the
// Stream exists, before anything is pulled from it, and Remove calls
// Detach once; the Source may call st.Wake in between, from any goroutine.
type Attacher interface {
	Source
	Attach(st *Stream)
	Detach()
}

// Recycler is a Source that reuses the buffers of its messages: when the
// MessageWriter is done with a message once it returns
// (SchedulerConfig.WriterReleases), the Scheduler hands each whole message
// the Source built back to Recycle after writing it (never one it cut into
// fragments). Recycle is called from the writer goroutine and must not
// block.
type Recycler interface {
	Source
	Recycle(m Message)
}

// Message is one data message as a Source hands it to the Scheduler: its
// exact JSON text, or its binary form, or both, and its size.
//
// The size is always the text's (seed 000 "Message Size": the UTF-16 bytes
// of the exact JSON text), whichever form is sent, so that both peers count
// the same bytes; a message that carries its bytes in binary form spares
// building a text only to have the transport decode it again
// (delivery/bytestream builds both forms and knows the size from the
// length).
type Message struct {
	// Text is the exact JSON-RPC text. It may be nil when Binary is set:
	// then the Scheduler builds it with Form only where it is needed (a
	// writer without the binary form, or a message to fragment).
	Text []byte
	// Size is the text's size in UTF-16 bytes; 0 means "measure Text"
	// (Measure), which a Source that knows the size spares the writer.
	Size UTF16Bytes
	// Binary, when not nil, is the message's binary form: the payload the
	// transport carries as it is where the connection negotiated it
	// (SchedulerConfig.Binary, BinaryWriter).
	Binary []byte
	// Framed, when not nil, is Binary's buffer from FrameRoom bytes before
	// Binary: Binary == Framed[FrameRoom:]. A FramedWriter writes its frame
	// header into that room and the frame from the one buffer, so the
	// binary form is not copied on its way to the socket. The buffer to give
	// back to a pool is Framed.
	Framed []byte
	// Form rebuilds the text from Binary; set whenever Binary is.
	Form TextForm
}

// FrameRoom is the room a Message's Framed buffer leaves in front of its
// binary form: a transport-io frame header (transportio.FrameHeaderLen,
// seed 002 §5.1: Length, Type, Codec, Reserved, Event ID).
const FrameRoom = 12

// TextForm rebuilds the exact text that a binary form stands for.
type TextForm interface {
	// AppendText appends to dst the text binary stands for and returns
	// the extended slice.
	AppendText(dst, binary []byte) []byte
}

// IsZero reports whether m is no message (a Source with nothing ready).
func (m Message) IsZero() bool { return m.Text == nil && m.Binary == nil }

// text returns m's text, built from its binary form into dst when it has
// none.
func (m Message) text(dst []byte) []byte {
	if m.Text != nil {
		return m.Text
	}
	return m.Form.AppendText(dst[:0], m.Binary)
}

// sized returns m with its Size set: measured from the text when the
// Source left it 0 (the text built first when there is only a binary
// form).
func (m Message) sized() Message {
	if m.Size > 0 {
		return m
	}
	if m.Text == nil {
		m.Text = m.Form.AppendText(nil, m.Binary)
	}
	m.Size = Measure(m.Text)
	return m
}
