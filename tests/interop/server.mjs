// A reference transport-io server (npm transport-io 0.8.0) on the §3.3
// WebSocket mapping, answering a little AHP so the sidecar's Go client can
// dial it. Prints {"port":N} once listening; runs until killed or stdin ends.
//
// The reference server registers onSession handlers only after the session's
// start() has resolved, a few microtasks after the peer's HANDSHAKE frame was
// read; an EMIT read in the same turn of the event loop (it arrived in the
// same WebSocket message or the same TCP read, as on a loaded machine) finds
// no handler and is dropped. afterHandshake() holds every byte after frame 0
// until the next turn, by when the handlers are in place.
import { createServer, defineContract, reliable } from 'transport-io';
import { listenWebSocket } from 'transport-io/websocket-node-transport';

// afterHandshake wraps a Connection so that its peer's emit stream yields
// frame 0 (the 4-byte big-endian length prefix and what it counts) alone and
// the rest only after one setImmediate.
function afterHandshake(conn) {
  return new Proxy(conn, {
    get(target, prop) {
      if (prop === 'onEmitStream') {
        return (cb) => target.onEmitStream((readable) => cb(readable.pipeThrough(holdAfterFrame0())));
      }
      const v = Reflect.get(target, prop, target);
      return typeof v === 'function' ? v.bind(target) : v;
    },
  });
}

function holdAfterFrame0() {
  let head = new Uint8Array(0); // bytes of frame 0 seen so far; null once it passed
  return new TransformStream({
    async transform(chunk, out) {
      if (head === null) {
        out.enqueue(chunk);
        return;
      }
      const merged = new Uint8Array(head.byteLength + chunk.byteLength);
      merged.set(head, 0);
      merged.set(chunk, head.byteLength);
      if (merged.byteLength < 4) {
        head = merged;
        return;
      }
      const end = 4 + new DataView(merged.buffer).getUint32(0, false);
      if (merged.byteLength < end) {
        head = merged;
        return;
      }
      head = null;
      out.enqueue(merged.subarray(0, end));
      await new Promise((resolve) => setImmediate(resolve));
      if (merged.byteLength > end) out.enqueue(merged.subarray(end));
    },
  });
}

const contract = defineContract({ ahp: reliable() });
const server = createServer({ contract });
const listener = await listenWebSocket({ port: 0, host: '127.0.0.1', path: '/transport-io' });

server.onSession((peer) => {
  peer.on('ahp', (msg) => {
    const reply = (result) => peer.emit('ahp', { jsonrpc: '2.0', id: msg.id, result });
    switch (msg.method) {
      case 'initialize':
        reply({ protocolVersion: '0.5.0', serverInfo: { name: 'node-interop' }, snapshots: [] });
        peer.emit('ahp', { jsonrpc: '2.0', method: 'action', params: { channel: 'ahp-root://', serverSeq: 1, action: { type: 'interop/hello', data: 'from-node' } } });
        break;
      case 'ping':
        reply(null);
        break;
      case 'echo':
        reply(msg.params);
        break;
      default:
        if (msg.id !== undefined) peer.emit('ahp', { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'method not found' } });
    }
  });
});
await server.listen();
server.withFallback({
  async *sessions() {
    for await (const conn of listener.sessions()) yield afterHandshake(conn);
  },
});
console.log(JSON.stringify({ port: listener.port }));
process.stdin.resume();
process.stdin.on('end', () => { listener.stop(); process.exit(0); });
