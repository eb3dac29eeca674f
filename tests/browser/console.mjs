// The web console end to end in a real headless Chromium (run by tests/it/console.rs).
//
// Env: ADMIN_URL (the admin listener, e.g. http://127.0.0.1:8081), PUBLIC_URL (the gateway's
// public base), ADMIN_TOKEN, CHAT_MODEL (a chat model the gateway serves), SHOTS_DIR (where the
// full-page screenshots go), CHROMIUM (optional; default /usr/bin/chromium), UPGRADES (optional:
// `1` when the test runner upgrades the gateway on request — the script prints a line `UPGRADE`
// and waits for a line `upgraded` on its stdin).
//
// Flow: a wrong token is refused inline; sign in; create a workspace; (with UPGRADES) the
// gateway is upgraded under the page, which stays signed in; top up 10 USD; create a
// key and read its once-shown secret back from the clipboard; the secret leaves the page with
// its dialog; the secret works on the public API (models, one chat completion); revoke it in
// the console; the proxy refuses it (401 invalid_key); a key created with a model allowlist sees
// only that model and is refused another (403 model_not_allowed), and an edit of its list in the
// console reaches the proxy; a management key is created (its secret shown once), works on the
// admin API for its workspace only, and is revoked; the request shows in the usage table and
// chart; the catalog lists models; the audit log holds the changes; sign out. Any uncaught page
// error or console error (other than the 401s provoked on purpose) fails the run.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import readline from 'node:readline';
import { chromium } from 'playwright-core';

const env = (name, fallback) => {
  const v = process.env[name] ?? fallback;
  if (v === undefined || v === '') {
    console.error(`console.mjs: the environment variable ${name} is required`);
    process.exit(2);
  }
  return v;
};
const ADMIN_URL = env('ADMIN_URL').replace(/\/+$/, '');
const PUBLIC_URL = env('PUBLIC_URL').replace(/\/+$/, '');
const ADMIN_TOKEN = env('ADMIN_TOKEN');
const CHAT_MODEL = env('CHAT_MODEL');
const SHOTS_DIR = env('SHOTS_DIR');
const CHROMIUM = env('CHROMIUM', '/usr/bin/chromium');
const UPGRADES = process.env.UPGRADES === '1';
const TIMEOUT = 10_000;

// A run never hangs the test suite.
const watchdog = setTimeout(() => {
  console.error('FAIL: the browser test did not finish within 180 s');
  process.exit(1);
}, 180_000);
watchdog.unref();

fs.mkdirSync(SHOTS_DIR, { recursive: true });

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
let current = 'start';
async function step(name, fn) {
  current = name;
  const t0 = Date.now();
  await fn();
  console.log(`ok   ${name} (${Date.now() - t0} ms)`);
}

/** Polls `fn` (returning a truthy value when done) every `every` ms for at most `ms`. */
async function until(ms, what, fn, every = 100) {
  const deadline = Date.now() + ms;
  let last;
  for (;;) {
    last = await fn();
    if (last) return last;
    if (Date.now() > deadline) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(every);
  }
}

async function publicPost(secret, p, body) {
  const res = await fetch(PUBLIC_URL + p, {
    method: 'POST',
    headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body),
  });
  const text = await res.text();
  let parsed = null;
  try { parsed = JSON.parse(text); } catch (_) { parsed = text; }
  return { status: res.status, body: parsed };
}

async function adminGet(secret, p) {
  const res = await fetch(`${ADMIN_URL}/admin/v1${p}`, { headers: { Authorization: `Bearer ${secret}` } });
  const text = await res.text();
  let body = null;
  try { body = JSON.parse(text); } catch (_) { body = text; }
  return { status: res.status, body };
}

const chatBody = (model) => ({ model, messages: [{ role: 'user', content: 'hi' }] });

async function publicGet(secret, p) {
  const res = await fetch(PUBLIC_URL + p, { headers: { Authorization: `Bearer ${secret}` } });
  const text = await res.text();
  let body = null;
  try { body = JSON.parse(text); } catch (_) { body = text; }
  return { status: res.status, body };
}

/** Has the test runner upgrade the gateway (`serve -u`, then SIGQUIT to the old process). */
const runnerLines = UPGRADES ? readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]() : null;
async function upgradeGateway() {
  console.log('UPGRADE');
  const { value, done } = await runnerLines.next();
  assert.ok(!done && value === 'upgraded', `the test runner did not upgrade the gateway (${value})`);
}

// ---------------------------------------------------------------- page error tracking

const pageErrors = [];
const consoleErrors = [];
// 401s from the admin session endpoint are expected while signed out (the console's first
// `GET /admin/v1/session`, and the wrong token we submit on purpose).
let signedOut = true;

function watch(page) {
  page.on('pageerror', (err) => pageErrors.push(`${err.name}: ${err.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const url = (msg.location() && msg.location().url) || '';
    const text = msg.text();
    const provoked401 = signedOut && /status of 401/.test(text) && url.startsWith(`${ADMIN_URL}/admin/v1/session`);
    if (provoked401) return;
    consoleErrors.push(`${text}${url ? ` (at ${url})` : ''}`);
  });
}

function noPageErrors() {
  assert.deepEqual(pageErrors, [], `uncaught errors in the page:\n${pageErrors.join('\n')}`);
  assert.deepEqual(consoleErrors, [], `console errors in the page:\n${consoleErrors.join('\n')}`);
}

async function shot(page, name) {
  await page.screenshot({ path: path.join(SHOTS_DIR, `${name}.png`), fullPage: true });
}

// ---------------------------------------------------------------- the run

async function waitForAdmin() {
  await until(15_000, `the admin listener at ${ADMIN_URL}`, async () => {
    try {
      const res = await fetch(`${ADMIN_URL}/console/app.js`);
      return res.status === 200;
    } catch (_) {
      return false;
    }
  }, 100);
}

async function run(browser) {
  const context = await browser.newContext({ viewport: { width: 1366, height: 768 } });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: ADMIN_URL });
  const page = await context.newPage();
  activePage = page;
  page.setDefaultTimeout(TIMEOUT);
  watch(page);
  const wsName = `browser-${Date.now().toString(36)}`;
  let wsId;
  let secret;

  await step('the sign-in page loads', async () => {
    await page.goto(`${ADMIN_URL}/`);
    await page.locator('#signin-form').waitFor();
    await shot(page, '01-sign-in');
  });

  await step('a wrong token is refused with an inline error', async () => {
    await page.fill('#signin-token', `not-the-token-${Date.now()}`);
    await page.click('#signin-submit');
    const err = page.locator('#signin-error');
    await err.waitFor({ state: 'visible' });
    const text = (await err.textContent()).trim();
    assert.ok(text.length > 0, 'the sign-in error is empty');
    assert.equal(await page.locator('#signin-form').count(), 1, 'a wrong token must keep the sign-in form');
    assert.equal(await page.locator('#nav-workspaces').count(), 0, 'a wrong token must not sign in');
  });

  await step('sign in with the admin token', async () => {
    await page.fill('#signin-token', ADMIN_TOKEN);
    await page.click('#signin-submit');
    await page.locator('#page-workspaces').waitFor();
    signedOut = false;
    await page.locator('#ws-table[data-state="ready"]').waitFor({ state: 'attached' });
  });

  await step('create a workspace', async () => {
    await page.fill('#ws-create-name', wsName);
    await page.click('#ws-create-submit');
    await page.locator('#page-workspace').waitFor();
    await page.waitForFunction((n) => document.querySelector('#ws-title')?.textContent === n, wsName);
    wsId = (await page.textContent('#ws-id')).trim();
    assert.match(wsId, /^ws_/, `workspace id: ${wsId}`);
    assert.equal((await page.textContent('#ws-balance')).trim(), '$0.0000');
  });

  if (UPGRADES) {
    await step('the gateway upgrades and the console stays signed in', async () => {
      await upgradeGateway();
      // The page as it was: its next call carries the same cookie to the new process.
      await page.click('#nav-workspaces');
      await page.locator(`#ws-table tr[data-id="${wsId}"]`).waitFor();
      // A fresh load asks the new process for the session, and is not sent to sign in.
      await page.reload();
      await page.locator('#nav-workspaces').waitFor();
      assert.equal(await page.locator('#signin-form').count(), 0, 'signed out by the upgrade');
    });
  }

  await step('the workspaces list shows it', async () => {
    await page.click('#nav-workspaces');
    const row = page.locator(`#ws-table tr[data-id="${wsId}"]`);
    await row.waitFor();
    assert.equal((await row.locator('[data-testid="ws-link"]').textContent()).trim(), wsName);
    assert.equal((await row.locator('[data-testid="ws-balance"]').textContent()).trim(), '$0.0000');
    await shot(page, '02-workspaces');
    await row.locator('[data-testid="ws-link"]').click();
    await page.locator('#page-workspace').waitFor();
  });

  await step('top up 10 USD and see the balance', async () => {
    await page.click('#tab-credits');
    await page.locator('#credit-form').waitFor();
    await page.locator('#ledger-table[data-state="ready"]').waitFor({ state: 'attached' });
    await page.fill('#credit-amount', '10');
    await page.fill('#credit-note', 'browser test top-up');
    await page.click('#credit-submit');
    await page.waitForFunction(() => document.querySelector('#ws-balance')?.textContent === '$10.0000');
    const row = page.locator('#ledger-table tr[data-kind="credit"]').first();
    await row.waitFor();
    assert.equal((await row.locator('[data-testid="ledger-amount"]').textContent()).trim(), '+$10.0000');
    assert.match(await row.textContent(), /browser test top-up/);
    assert.equal(await page.locator('#credit-error').isVisible(), false, 'no credit error');
    await shot(page, '04-credits');
  });

  await step('create a key and see its secret once', async () => {
    await page.click('#tab-keys');
    await page.locator('#keys-empty:not([hidden])').waitFor();
    assert.match(await page.textContent('#keys-empty'), /No keys yet/);
    await page.click('#key-create-open');
    await page.locator('#key-dialog').waitFor();
    await page.fill('#key-name', 'browser-key');
    await page.click('#key-create-submit');
    const code = page.locator('#key-secret');
    await code.waitFor();
    secret = (await code.textContent()).trim();
    assert.match(secret, /^sk-tg-/, `the secret shown: ${secret}`);
    assert.match(await page.textContent('#key-secret-warning'), /cannot be shown again/);
  });

  await step('Copy puts the secret on the clipboard', async () => {
    await page.click('#key-secret-copy');
    await page.waitForFunction(() => /Copied/.test(document.querySelector('#key-secret-copied')?.textContent || ''));
    const clip = await page.evaluate(() => navigator.clipboard.readText());
    assert.equal(clip, secret, 'the clipboard holds the secret');
    await shot(page, '03-keys-secret');
  });

  await step('closing the dialog removes the secret from the page', async () => {
    await page.click('#key-secret-done');
    await page.locator('#key-dialog').waitFor({ state: 'detached' });
    const row = page.locator('#keys-table tr[data-testid="key-row"]').first();
    await row.waitFor();
    assert.equal((await row.locator('[data-testid="key-status"]').textContent()).trim(), 'active');
    assert.equal((await row.locator('[data-testid="key-name"]').textContent()).trim(), 'browser-key');
    const leaks = await page.evaluate((s) => {
      const found = [];
      if (document.documentElement.outerHTML.includes(s)) found.push('markup');
      if (document.body.innerText.includes(s)) found.push('text');
      for (const el of document.querySelectorAll('input, textarea')) if (el.value.includes(s)) found.push(`value of ${el.id || el.name}`);
      if (String(window.getSelection()).includes(s)) found.push('selection');
      return found;
    }, secret);
    assert.deepEqual(leaks, [], `the secret is still in the page: ${leaks.join(', ')}`);
  });

  await step('the secret works on the public API', async () => {
    // The new key reaches the proxy through the change feed.
    const r = await until(5_000, 'GET /v1/models to answer 200 for the new key', async () => {
      const x = await publicGet(secret, '/v1/models');
      return x.status === 200 ? x : null;
    });
    assert.ok(Array.isArray(r.body.data), 'GET /v1/models lists models');
    const res = await fetch(`${PUBLIC_URL}/v1/chat/completions`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${secret}`, 'Content-Type': 'application/json' },
      body: JSON.stringify({ model: CHAT_MODEL, messages: [{ role: 'user', content: 'hi' }] }),
    });
    const text = await res.text();
    assert.equal(res.status, 200, `chat completion: ${res.status} ${text}`);
    const body = JSON.parse(text);
    assert.ok(Array.isArray(body.choices) && body.choices.length > 0, `chat completion body: ${text}`);
  });

  await step('revoke the key in the console', async () => {
    const row = page.locator('#keys-table tr[data-testid="key-row"]').first();
    await row.locator('[data-testid="key-revoke"]').click();
    await page.locator('#confirm-dialog').waitFor();
    await page.click('#confirm-ok');
    await page.locator('#confirm-dialog').waitFor({ state: 'detached' });
    await page.waitForFunction(() => document.querySelector('#keys-table tr[data-testid="key-row"] [data-testid="key-status"]')?.textContent === 'revoked');
  });

  await step('the proxy refuses the revoked key (401 invalid_key)', async () => {
    const r = await until(5_000, 'GET /v1/models to refuse the revoked key', async () => {
      const x = await publicGet(secret, '/v1/models');
      return x.status !== 200 ? x : null;
    });
    assert.equal(r.status, 401, `status after revocation: ${JSON.stringify(r)}`);
    assert.equal(r.body?.error?.code, 'invalid_key', `error after revocation: ${JSON.stringify(r.body)}`);
  });

  let limited;
  await step('create a key with a model allowlist', async () => {
    await page.click('#key-create-open');
    await page.locator('#key-dialog').waitFor();
    await page.fill('#key-name', 'limited-key');
    await page.fill('#key-models', `${CHAT_MODEL}\n`);
    await page.click('#key-create-submit');
    limited = (await page.locator('#key-secret').textContent()).trim();
    assert.match(limited, /^sk-tg-/);
    await page.click('#key-secret-done');
    await page.locator('#key-dialog').waitFor({ state: 'detached' });
    const row = page.locator('#keys-table tr[data-testid="key-row"]').first();
    assert.equal((await row.locator('[data-testid="key-name"]').textContent()).trim(), 'limited-key');
    assert.equal((await row.locator('[data-testid="key-models"]').textContent()).trim(), `models: ${CHAT_MODEL}`);
  });

  await step('the allowlisted key sees only its model and is refused another (403)', async () => {
    const r = await until(5_000, 'GET /v1/models to answer 200 for the limited key', async () => {
      const x = await publicGet(limited, '/v1/models');
      return x.status === 200 ? x : null;
    });
    assert.deepEqual(r.body.data.map((m) => m.id), [CHAT_MODEL], 'only its model is listed');
    const ok = await publicPost(limited, '/v1/chat/completions', chatBody(CHAT_MODEL));
    assert.equal(ok.status, 200, `its model: ${JSON.stringify(ok.body)}`);
    const refused = await publicPost(limited, '/v1/chat/completions', chatBody('google/gemini-2.5-flash'));
    assert.equal(refused.status, 403, `another model: ${JSON.stringify(refused.body)}`);
    assert.equal(refused.body?.error?.code, 'model_not_allowed');
  });

  await step('edit the key\'s allowlist in the console; the proxy follows', async () => {
    const row = page.locator('#keys-table tr[data-testid="key-row"]').first();
    await row.locator('[data-testid="key-edit"]').click();
    await page.locator('#key-edit-dialog').waitFor();
    assert.equal(await page.inputValue('#key-edit-models'), CHAT_MODEL, 'the dialog shows the list');
    await page.fill('#key-edit-models', 'google/*');
    await page.click('#key-edit-submit');
    await page.locator('#key-edit-dialog').waitFor({ state: 'detached' });
    await page.waitForFunction(() => document.querySelector('#keys-table tr[data-testid="key-row"] [data-testid="key-models"]')?.textContent === 'models: google/*');
    await shot(page, '03b-keys-allowlist');
    const r = await until(5_000, `the proxy to refuse ${CHAT_MODEL} to the edited key`, async () => {
      const x = await publicPost(limited, '/v1/chat/completions', chatBody(CHAT_MODEL));
      return x.status === 403 ? x : null;
    });
    assert.equal(r.body?.error?.code, 'model_not_allowed');
  });

  let mkey;
  await step('create a management key and see its secret once', async () => {
    await page.locator('#mkeys-table[data-state="ready"]').waitFor({ state: 'attached' });
    await page.click('#mkey-create-open');
    await page.locator('#mkey-dialog').waitFor();
    await page.fill('#mkey-name', 'reseller-backend');
    await page.click('#mkey-create-submit');
    mkey = (await page.locator('#key-secret').textContent()).trim();
    assert.match(mkey, /^mk-tg-/, `the management key shown: ${mkey}`);
    assert.match(await page.textContent('#key-secret-warning'), /cannot be shown again/);
    await shot(page, '03c-management-key-secret');
    await page.click('#key-secret-done');
    await page.locator('#mkey-dialog').waitFor({ state: 'detached' });
    const row = page.locator('#mkeys-table tr[data-testid="mkey-row"]').first();
    await row.waitFor();
    assert.equal((await row.locator('[data-testid="mkey-name"]').textContent()).trim(), 'reseller-backend');
    assert.equal((await row.locator('[data-testid="mkey-status"]').textContent()).trim(), 'active');
    const inPage = await page.evaluate((s) => document.documentElement.outerHTML.includes(s), mkey);
    assert.equal(inPage, false, 'the management key left the page with its dialog');
  });

  await step('the management key works on its own workspace only', async () => {
    const keys = await adminGet(mkey, `/workspaces/${encodeURIComponent(wsId)}/keys`);
    assert.equal(keys.status, 200, `its workspace's keys: ${JSON.stringify(keys.body)}`);
    assert.ok(keys.body.data.some((k) => k.name === 'limited-key'));
    const catalog = await adminGet(mkey, '/catalog');
    assert.equal(catalog.status, 403, `the catalog: ${JSON.stringify(catalog.body)}`);
    const others = await adminGet(mkey, '/workspaces');
    assert.equal(others.status, 403);
  });

  await step('revoke the management key in the console', async () => {
    const row = page.locator('#mkeys-table tr[data-testid="mkey-row"]').first();
    await row.locator('[data-testid="mkey-revoke"]').click();
    await page.locator('#confirm-dialog').waitFor();
    await page.click('#confirm-ok');
    await page.locator('#confirm-dialog').waitFor({ state: 'detached' });
    await page.waitForFunction(() => document.querySelector('#mkeys-table tr[data-testid="mkey-row"] [data-testid="mkey-status"]')?.textContent === 'revoked');
    const after = await adminGet(mkey, `/workspaces/${encodeURIComponent(wsId)}/keys`);
    assert.equal(after.status, 401, 'a revoked management key is refused');
    await shot(page, '03d-management-keys');
  });

  await step('the request shows in the usage table and chart', async () => {
    await page.click('#tab-usage');
    await page.locator('#usage-table').waitFor({ state: 'attached' });
    await until(10_000, 'the chat request in the recent-requests table and a bar in the charts', async () => {
      await page.click('#usage-refresh');
      await page.locator('#usage-table[data-state="ready"]').waitFor({ state: 'attached' });
      await page.locator('#usage-charts[data-state="ready"]').waitFor({ state: 'attached' });
      const rows = await page.locator('#usage-table tr[data-testid="usage-row"]').count();
      const bars = await page.locator('#usage-chart-cost [data-testid="bar"]').count();
      const tokenBars = await page.locator('#usage-chart-tokens [data-testid="bar"]').count();
      return rows > 0 && bars > 0 && tokenBars > 0;
    }, 400);
    const row = page.locator('#usage-table tr[data-testid="usage-row"]').first();
    assert.equal((await row.locator('[data-testid="usage-model"]').textContent()).trim(), CHAT_MODEL);
    const rid = (await row.locator('[data-testid="usage-request-id"]').textContent()).trim();
    assert.ok(rid.length > 0, 'the request id is shown');
    assert.ok(await page.locator(`#usage-legend [data-model="${CHAT_MODEL}"]`).count() === 1, 'the legend names the model');
    await shot(page, '05-usage');
  });

  await step('the catalog lists models', async () => {
    await page.click('#nav-catalog');
    await page.locator('#catalog-table[data-state="ready"]').waitFor({ state: 'attached' });
    const n = await page.locator('#catalog-table tr[data-testid="model-row"]').count();
    assert.ok(n > 0, 'the catalog lists no model');
    await page.locator(`#catalog-table tr[data-testid="model-row"][data-model-id="${CHAT_MODEL}"]`).waitFor();
    const retired = page.locator('#catalog-table tr[data-model-id="google/gemini-2.0-flash"] [data-testid="model-shutdown"]');
    assert.match(await retired.textContent(), /shut down 2026-06-01/, 'a retired model shows its shutdown date');
    const sonnet = '#catalog-table tr[data-testid="model-row"][data-model-id="anthropic/claude-sonnet-4-5"]';
    assert.match(await page.locator(`${sonnet} [data-testid="model-aliases"]`).textContent(),
      /also claude-sonnet-4-5, claude-sonnet-4-5-20250929/, 'a model shows its aliases');
    // The filter finds a model by an alias.
    await page.fill('#catalog-filter', 'claude-sonnet-4-5-20250929');
    assert.equal(await page.locator('#catalog-table tr[data-testid="model-row"]:not([hidden])').count(), 1, 'one model answers to the alias');
    assert.ok(await page.locator(sonnet).isVisible(), 'and it is the model the alias names');
    await page.fill('#catalog-filter', '');
    await shot(page, '06-catalog');
  });

  await step('the audit log shows the changes', async () => {
    await page.click('#nav-audit');
    await page.locator('#audit-table[data-state="ready"]').waitFor({ state: 'attached' });
    const actions = await page.locator('#audit-table [data-testid="audit-action"]').allTextContents();
    for (const want of ['workspace.create', 'credit.add', 'key.create', 'key.revoke', 'key.update',
      'management_key.create', 'management_key.revoke']) {
      assert.ok(actions.includes(want), `the audit log lacks ${want}: ${actions.join(', ')}`);
    }
    // The revocation's before/after opens below its row.
    const revoke = page.locator('#audit-table tr[data-action="key.revoke"]').first();
    const toggle = revoke.locator('[data-testid="audit-change"]');
    if (await toggle.count()) {
      await toggle.click();
      await page.locator('#audit-table tr[data-action="key.revoke"] + tr[data-testid="audit-detail"]').first().waitFor();
    }
    await shot(page, '07-audit');
  });

  await step('no page or console errors', async () => noPageErrors());

  await step('sign out', async () => {
    await page.click('#signout');
    await page.locator('#signin-form').waitFor();
    signedOut = true;
    await page.reload();
    await page.locator('#signin-form').waitFor();
    assert.equal(await page.locator('#nav-workspaces').count(), 0, 'still signed in after signing out');
    noPageErrors();
  });

  await context.close();
}

let browser;
let activePage;
let code = 0;
try {
  current = 'wait for the admin listener';
  await waitForAdmin();
  current = 'launch Chromium';
  browser = await chromium.launch({
    executablePath: CHROMIUM,
    args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
      '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  await run(browser);
  console.log(`PASS: the console works end to end (screenshots in ${SHOTS_DIR})`);
} catch (e) {
  code = 1;
  const text = String(e && e.stack ? e.stack : e).replace(/\x1b\[[0-9;]*m/g, '');
  console.error(`FAIL at step "${current}": ${text}`);
  if (pageErrors.length) console.error(`page errors:\n  ${pageErrors.join('\n  ')}`);
  if (consoleErrors.length) console.error(`console errors:\n  ${consoleErrors.join('\n  ')}`);
  if (activePage) {
    const where = path.join(SHOTS_DIR, 'failure.png');
    await activePage.screenshot({ path: where, fullPage: true }).then(() => console.error(`the page at the failure: ${where}`), () => {});
  }
} finally {
  if (browser) await browser.close().catch(() => {});
}
process.exit(code);
