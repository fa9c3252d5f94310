// The reference transport-io client (npm transport-io 0.8.0) speaking AHP to
// the sidecar over the §3.3 WebSocket mapping. Usage: node client.mjs URL
// where URL is ws://HOST:PORT/transport-io?token=T. It prints one line per
// step and exits 0 when a terminal's output came back.
import { Client, defineContract, reliable } from 'transport-io';
import { WebSocketConnection } from 'transport-io/websocket-transport';
import WebSocket from 'ws';

const url = process.argv[2];
const contract = defineContract({ ahp: reliable() });

let lastConn = null;
function connect() {
  return new Promise((resolve, reject) => {
    const socket = new WebSocket(url);
    socket.binaryType = 'arraybuffer';
    // WebSocketConnection wants the WHATWG surface, which ws provides.
    const conn = new WebSocketConnection(socket);
    lastConn = conn;
    socket.addEventListener('open', () => resolve(conn));
    socket.addEventListener('error', () => reject(new Error('websocket error')));
  });
}

const client = new Client({ contract, connect });
const pending = new Map();
const notifications = [];
let waiter = null;
let nextId = 1;

client.on('ahp', (msg) => {
  if (msg.id !== undefined && pending.has(msg.id)) {
    pending.get(msg.id)(msg);
    pending.delete(msg.id);
    return;
  }
  notifications.push(msg);
  if (waiter) waiter();
});

function call(method, params) {
  const id = nextId++;
  return new Promise((resolve) => {
    pending.set(id, resolve);
    client.emit('ahp', { jsonrpc: '2.0', id, method, params });
  });
}

function until(pred, what, ms = 10000) {
  return new Promise((resolve, reject) => {
    const t = setTimeout(() => reject(new Error('timed out waiting for ' + what)), ms);
    const check = () => {
      const found = notifications.find(pred);
      if (found) { clearTimeout(t); waiter = null; resolve(found); }
    };
    waiter = check;
    check();
  });
}

const step = (name, value) => console.log(JSON.stringify({ step: name, value }));

try {
  await client.connect();
  step('connected', client.getSnapshot().status);
  const init = await call('initialize', { channel: 'ahp-root://', protocolVersions: ['0.5.0'], clientId: 'node-interop' });
  if (init.error) throw new Error('initialize: ' + JSON.stringify(init.error));
  step('initialize', init.result.protocolVersion);
  const uri = 'ahp-terminal:/node-interop';
  const created = await call('createTerminal', { channel: uri, command: ['sh', '-c', 'read x; echo interop-$((6*7))-$x'] });
  if (created.error) throw new Error('createTerminal: ' + JSON.stringify(created.error));
  const sub = await call('subscribe', { channel: uri });
  if (sub.error) throw new Error('subscribe: ' + JSON.stringify(sub.error));
  client.emit('ahp', { jsonrpc: '2.0', method: 'dispatchAction', params: { channel: uri, clientSeq: 1, action: { type: 'terminal/input', data: 'go\r' } } });
  let out = '';
  await until((m) => {
    const a = m.params && m.params.action;
    if (m.method === 'action' && a && a.type === 'terminal/data') out += a.data;
    return out.includes('interop-42-go');
  }, 'terminal output');
  step('output', 'interop-42-go');
  await call('disposeTerminal', { channel: uri });
  step('stats', client.stats());
  client.disconnect();
  process.exit(0);
} catch (e) {
  // How the transport closed: the session close code and reason as the
  // reference's WebSocket mapping decoded them (a refusal is 1007).
  const closed = lastConn ? await Promise.race([lastConn.closed, new Promise((r) => setTimeout(() => r(null), 2000))]) : null;
  console.log(JSON.stringify({ step: 'closed', value: closed }));
  console.log(JSON.stringify({ step: 'error', value: String(e && e.stack || e), state: client.getSnapshot() }));
  process.exit(1);
}
