// Claude Code, the real CLI (`node_modules/.bin/claude`, the native binary of
// @anthropic-ai/claude-code), in print mode against an Anthropic Messages endpoint: tollgate's
// door (run by tests/it/messages_clients.rs) or the simulator directly.
//
// Environment:
// - TOLLGATE_BASE_URL: the endpoint without /v1 (the CLI's ANTHROPIC_BASE_URL);
// - TOLLGATE_KEY, TOLLGATE_MODEL (the CLI's ANTHROPIC_MODEL, which it sends verbatim);
// - CLAUDE_AUTH: `api-key` (ANTHROPIC_API_KEY, sent as `x-api-key`, the default) or
//   `auth-token` (ANTHROPIC_AUTH_TOKEN, sent as `Authorization: Bearer`);
// - CLAUDE_TASK: `answer` (one prompt, one answer) or `tool` (the simulator asks for the Bash
//   tool by `[sim:call=Bash]` with `[sim:args=…]`; the CLI runs it unattended — allowed by
//   `--allowedTools Bash` — and sends its tool_result; the simulator then answers
//   "Echo: received 1 tool result(s)");
// - CLAUDE_TIMEOUT_MS (120000): the CLI is killed after that.
//
// The CLI runs in a fresh temporary HOME, config dir (CLAUDE_CONFIG_DIR) and working dir, with
// telemetry, error reporting, auto-update and other non-essential traffic off, and writes its
// debug log (`--debug-file`), whose `[API REQUEST]` and `API error (attempt …)` lines are
// counted. Exits non-zero (with the CLI's output and the log's tail) on the first mismatch;
// prints one `ok: …` line.
import { spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

const here = dirname(fileURLToPath(import.meta.url));
const env = process.env;
const base = env.TOLLGATE_BASE_URL;
const key = env.TOLLGATE_KEY;
const model = env.TOLLGATE_MODEL;
const auth = env.CLAUDE_AUTH ?? 'api-key';
const task = env.CLAUDE_TASK ?? 'answer';
const timeout = Number(env.CLAUDE_TIMEOUT_MS ?? 120000);
const claude = join(here, 'node_modules/.bin/claude');
if (!base || !key || !model) {
  console.error('FAILED: TOLLGATE_BASE_URL, TOLLGATE_KEY and TOLLGATE_MODEL are required');
  process.exit(2);
}
if (!existsSync(claude)) {
  console.error(`FAILED: ${claude} is missing: run \`make agent-deps\` (npm ci in tests/agents)`);
  process.exit(2);
}

const dir = mkdtempSync(join(tmpdir(), 'tollgate-claude-'));
const home = join(dir, 'home');
const config = join(dir, 'config');
const work = join(dir, 'work');
for (const d of [home, config, work]) mkdirSync(d);
const debugFile = join(dir, 'debug.log');

const answerPrompt = 'hello from claude code';
const proofArgs = JSON.stringify({
  command: 'echo tollgate-tool-ran > proof.txt && echo wrote-proof',
  description: 'Write the proof file',
});
const prompt =
  task === 'tool' ? `Write the proof file. [sim:call=Bash] [sim:args=${proofArgs}]` : answerPrompt;

const childEnv = {
  PATH: env.PATH ?? '/usr/bin:/bin',
  HOME: home,
  CLAUDE_CONFIG_DIR: config,
  ANTHROPIC_BASE_URL: base,
  ANTHROPIC_MODEL: model,
  // Any background request (a "small fast" model's) goes to the same model.
  ANTHROPIC_DEFAULT_HAIKU_MODEL: model,
  ANTHROPIC_SMALL_FAST_MODEL: model,
  DISABLE_TELEMETRY: '1',
  DISABLE_ERROR_REPORTING: '1',
  DISABLE_AUTOUPDATER: '1',
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC: '1',
  // One retry, not ten with backoff: a refused request fails the run in seconds. (The CLI's
  // fallback after a 400 for a beta-only body, e.g. a mid-conversation `system` message, is
  // not a retry and still happens.)
  CLAUDE_CODE_MAX_RETRIES: '1',
};
if (auth === 'auth-token') childEnv.ANTHROPIC_AUTH_TOKEN = key;
else childEnv.ANTHROPIC_API_KEY = key;

const args = ['-p', prompt, '--output-format', 'json', '--debug-file', debugFile];
if (task === 'tool') args.push('--allowedTools', 'Bash');
const run = spawnSync(claude, args, {
  cwd: work,
  env: childEnv,
  encoding: 'utf8',
  timeout,
  killSignal: 'SIGKILL',
  stdio: ['ignore', 'pipe', 'pipe'],
});

const log = existsSync(debugFile) ? readFileSync(debugFile, 'utf8') : '';
const apiRequests = log.split('\n').filter((l) => l.includes('[API REQUEST]')).length;
const apiErrors = log
  .split('\n')
  .filter((l) => /API error \(attempt/.test(l))
  .map((l) => l.replace(/^.*API error \(attempt [^)]*\): /, '').slice(0, 300));

function fail(what) {
  const apiLines = log
    .split('\n')
    .filter((l) => /\[API|API error|Stream started|tool_dispatch|\[ERROR\]/.test(l))
    .slice(-40);
  console.error(
    [
      `FAILED: ${what}`,
      `claude ${args.map((a) => JSON.stringify(a)).join(' ')} (status ${run.status}, signal ${run.signal}, error ${run.error})`,
      `--- stdout\n${run.stdout}`,
      `--- stderr\n${run.stderr}`,
      `--- the debug log's API lines (${debugFile})\n${apiLines.join('\n')}`,
    ].join('\n'),
  );
  process.exit(1);
}

if (run.error || run.signal) fail(`the CLI did not finish within ${timeout} ms`);
let out;
try {
  out = JSON.parse(run.stdout);
} catch (e) {
  fail(`the CLI's output is not JSON (${e})`);
}
if (run.status !== 0 || out.is_error) fail(`the CLI reports an error: ${out.result ?? out.subtype}`);
if (typeof out.result !== 'string' || !out.result.startsWith('Echo: ')) fail(`result ${JSON.stringify(out.result)}`);
if (task === 'tool') {
  if (out.result !== 'Echo: received 1 tool result(s)') fail(`the answer after the tool: ${out.result}`);
  if (out.num_turns !== 2) fail(`two turns, not ${out.num_turns}`);
  const proof = join(work, 'proof.txt');
  if (!existsSync(proof) || readFileSync(proof, 'utf8') !== 'tollgate-tool-ran\n') fail('the Bash tool did not run');
  if (!/tool_dispatch_end tool=Bash .*outcome=ok/.test(log)) fail('no successful Bash dispatch in the debug log');
} else if (!out.result.endsWith(answerPrompt)) {
  fail(`the answer does not echo the prompt: ${out.result.slice(-200)}`);
}
if (apiRequests < (task === 'tool' ? 2 : 1)) fail(`only ${apiRequests} API requests in the debug log`);

rmSync(dir, { recursive: true, force: true });
const errors = apiErrors.length ? ` (recovered from ${apiErrors.length} refused: ${apiErrors.join(' | ')})` : '';
console.log(
  `ok: claude code ${task} via ${auth} on ${model}: ${apiRequests} API requests, ${out.num_turns} turns${errors}`,
);
