// A reference transport-io server (npm transport-io 0.8.0) on the §3.3
// WebSocket mapping, answering a little AHP so the sidecar's Go client can
// dial it. Prints {"port":N} once listening; runs until killed or stdin ends.
import { createServer, defineContract, reliable } from 'transport-io';
import { listenWebSocket } from 'transport-io/websocket-node-transport';

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
server.withFallback(listener);
console.log(JSON.stringify({ port: listener.port }));
process.stdin.resume();
process.stdin.on('end', () => { listener.stop(); process.exit(0); });
