// tollgate console: a single-page client of the admin API (/admin/v1), hash-routed, with no
// framework and no external assets. Every string from the API reaches the DOM through
// textContent / createElement (never innerHTML); money stays an exact decimal string from the
// API to the screen (charts alone use floats, for bar heights).
'use strict';

(() => {
  const API = '/admin/v1';
  const PAGE = 50;
  const state = { csrf: null, signedIn: false, notice: null, shell: null };

  // ------------------------------------------------------------------ DOM helpers

  /** An element: props are attributes, `class`, `text`, `on<event>` handlers, `dataset`. */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    setProps(el, props);
    add(el, children);
    return el;
  }

  function setProps(el, props) {
    if (!props) return;
    for (const [k, v] of Object.entries(props)) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.setAttribute('class', v);
      else if (k === 'text') el.textContent = String(v);
      else if (k === 'dataset') Object.assign(el.dataset, v);
      else if (k === 'value' && 'value' in el) el.value = String(v);
      else if (k === 'checked') el.checked = !!v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function add(el, ...children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      el.append(c instanceof Node ? c : String(c));
    }
    return el;
  }

  const SVG_NS = 'http://www.w3.org/2000/svg';
  /** An SVG element: props are attributes (plus `text`, `class`, `dataset`). */
  function s(tag, props, ...children) {
    const el = document.createElementNS(SVG_NS, tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'text') el.textContent = String(v);
        else if (k === 'dataset') Object.assign(el.dataset, v);
        else el.setAttribute(k, String(v));
      }
    }
    add(el, children);
    return el;
  }

  function clear(el) {
    while (el.firstChild) el.firstChild.remove();
    return el;
  }

  /** Small line icons (static markup built with createElementNS). */
  function icon(name, size = 16) {
    const paths = {
      workspaces: ['M3 7h18v13H3z', 'M8 7V4h8v3'],
      catalog: ['M4 5h16', 'M4 12h16', 'M4 19h10'],
      audit: ['M6 3h9l4 4v14H6z', 'M9 12h7', 'M9 16h7', 'M9 8h3'],
      out: ['M10 4H5v16h5', 'M14 8l4 4-4 4', 'M8 12h10'],
      plus: ['M12 5v14', 'M5 12h14'],
      key: ['M14 10a4 4 0 1 0-1 2.6L20 20', 'M17 17l2-2'],
      copy: ['M9 9h11v11H9z', 'M5 15H4V4h11v1'],
      refresh: ['M20 11a8 8 0 1 0-2.3 5.7', 'M20 4v7h-7'],
      warn: ['M12 3l10 18H2z', 'M12 10v5', 'M12 18v.5'],
    };
    return s('svg', { width: size, height: size, viewBox: '0 0 24 24', fill: 'none', stroke: 'currentColor',
      'stroke-width': 2, 'stroke-linecap': 'round', 'stroke-linejoin': 'round', 'aria-hidden': 'true' },
    (paths[name] || []).map((d) => s('path', { d })));
  }

  function logo(size = 28) {
    return s('svg', { width: size, height: size, viewBox: '0 0 32 32', 'aria-hidden': 'true' },
      s('rect', { width: 32, height: 32, rx: 8, fill: '#4f46e5' }),
      s('path', { d: 'M8 11h16M16 11v13', stroke: '#fff', 'stroke-width': 3, 'stroke-linecap': 'round', fill: 'none' }),
      s('circle', { cx: 24, cy: 22, r: 3, fill: '#a5b4fc' }));
  }

  function toast(message) {
    const box = document.getElementById('toasts');
    const t = h('div', { class: 'toast', 'data-testid': 'toast', text: message });
    box.append(t);
    setTimeout(() => t.remove(), 2500);
    while (box.children.length > 3) box.firstChild.remove();
  }

  /** Marks a button busy while `fn` runs; returns fn's result. */
  async function busy(btn, fn) {
    const was = btn.disabled;
    btn.disabled = true;
    btn.classList.add('busy');
    try {
      return await fn();
    } finally {
      btn.classList.remove('busy');
      btn.disabled = was;
    }
  }

  /** An inline error slot (role=alert), hidden until `show`. */
  function errorSlot(id, tight) {
    const el = h('div', { id, class: tight ? 'inline-error tight' : 'inline-error', role: 'alert', hidden: true, 'data-testid': 'inline-error' });
    el.show = (msg) => { el.textContent = msg; el.hidden = false; };
    el.hide = () => { el.textContent = ''; el.hidden = true; };
    return el;
  }

  // ------------------------------------------------------------------ formatting

  /** Exact decimal text to `$1,234.5600`: at least `minFrac` decimals, trailing zeros trimmed
   *  beyond them, no float anywhere. `sign` adds `+` to positive amounts. */
  function usd(value, { minFrac = 4, sign = false } = {}) {
    if (value === null || value === undefined || value === '') return '—';
    const text = String(value).trim();
    const m = /^([+-])?(\d*)(?:\.(\d*))?$/.exec(text);
    if (!m || (m[2] === '' && (m[3] === undefined || m[3] === ''))) return text;
    let int = (m[2] || '0').replace(/^0+(?=\d)/, '');
    let frac = (m[3] || '').replace(/0+$/, '');
    if (frac.length < minFrac) frac = frac.padEnd(minFrac, '0');
    const neg = m[1] === '-' && /[1-9]/.test(int + frac);
    int = int.replace(/\B(?=(\d{3})+(?!\d))/g, ',');
    return (neg ? '−' : sign ? '+' : '') + '$' + int + (frac ? '.' + frac : '');
  }

  /** A price (USD per 1M tokens; the API may send a JSON number with at most six decimals,
   *  whose shortest text is the literal written, or a string). */
  function priceText(v) {
    if (v === null || v === undefined) return '';
    return typeof v === 'number' ? numberText(v) : String(v);
  }

  function numberText(n) {
    // Shortest round-trip text; expand exponents (1e-7) without losing digits.
    const t = String(n);
    if (!/e/i.test(t)) return t;
    return n.toFixed(12).replace(/\.?0+$/, '');
  }

  const DEC_SCALE = 12;
  /** Exact decimal text to BigInt pico-units (for exact sums). */
  function toPico(value) {
    const m = /^([+-])?(\d*)(?:\.(\d*))?$/.exec(String(value ?? '0').trim());
    if (!m) return 0n;
    const frac = (m[3] || '').slice(0, DEC_SCALE).padEnd(DEC_SCALE, '0');
    const v = BigInt((m[2] || '0') + frac);
    return m[1] === '-' ? -v : v;
  }

  function fromPico(p) {
    const neg = p < 0n;
    const abs = (neg ? -p : p).toString().padStart(DEC_SCALE + 1, '0');
    const int = abs.slice(0, -DEC_SCALE);
    const frac = abs.slice(-DEC_SCALE).replace(/0+$/, '');
    return (neg ? '-' : '') + int + (frac ? '.' + frac : '');
  }

  function int(n) {
    if (n === null || n === undefined) return '—';
    return Number(n).toLocaleString('en-US');
  }

  function pad2(n) { return String(n).padStart(2, '0'); }

  /** RFC 3339 to local `2026-11-25 14:03:12`. */
  function when(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    if (Number.isNaN(d.getTime())) return String(iso);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())}`;
  }

  /** Without seconds, for narrow cells (the full time is in the title). */
  function whenShort(iso) {
    const t = when(iso);
    return /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$/.test(t) ? t.slice(0, 16) : t;
  }

  /** Exact decimal text without trailing zeros (`5.0` → `5`), for form fields. */
  function plainDecimal(v) {
    if (v === null || v === undefined) return '';
    const t = String(v);
    return /^-?\d+\.\d*$/.test(t) ? t.replace(/0+$/, '').replace(/\.$/, '') : t;
  }

  function timeCell(iso) {
    return h('td', { class: 'nowrap', title: iso || '' }, when(iso));
  }

  function badge(kind, label, extra) {
    return h('span', Object.assign({ class: `badge badge-${kind}` }, extra || {}), label);
  }

  const isDecimal = (t) => /^\d+(\.\d+)?$/.test(t) || /^\d*\.\d+$/.test(t);

  // ------------------------------------------------------------------ the API

  class ApiError extends Error {
    constructor(status, message, code) {
      super(message);
      this.status = status;
      this.code = code || '';
    }
  }

  async function api(method, path, body) {
    const headers = { Accept: 'application/json' };
    const init = { method, headers, credentials: 'same-origin', cache: 'no-store' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    if (method !== 'GET' && state.csrf) headers['X-CSRF-Token'] = state.csrf;
    let res;
    try {
      res = await fetch(API + path, init);
    } catch (e) {
      throw new ApiError(0, `Cannot reach the admin API (${e.message}).`, 'network');
    }
    const text = await res.text();
    let data = null;
    if (text) {
      try { data = JSON.parse(text); } catch (_) { data = null; }
    }
    if (!res.ok) {
      const env = data && data.error;
      const message = (env && env.message) || `The admin API answered ${res.status} ${res.statusText}.`.replace(' .', '.');
      const err = new ApiError(res.status, message, env && env.code);
      if (res.status === 401 && path !== '/session' && state.signedIn) sessionLost();
      throw err;
    }
    return data;
  }

  function query(params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (v !== undefined && v !== null && v !== '') q.set(k, v);
    }
    const t = q.toString();
    return t ? '?' + t : '';
  }

  const enc = encodeURIComponent;

  // ------------------------------------------------------------------ session and routing

  function sessionLost() {
    state.signedIn = false;
    state.csrf = null;
    state.notice = 'Your session has ended. Sign in again.';
    render();
  }

  function route() {
    const parts = location.hash.replace(/^#\/?/, '').split('/').filter(Boolean).map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    if (parts.length === 0 || (parts[0] === 'workspaces' && parts.length === 1)) return { page: 'workspaces' };
    if (parts[0] === 'workspaces') return { page: 'workspace', ws: parts[1], tab: parts[2] || 'keys' };
    if (parts[0] === 'catalog') return { page: 'catalog' };
    if (parts[0] === 'audit') return { page: 'audit', ws: parts[1] || '' };
    return { page: 'notfound' };
  }

  function go(hash) {
    if (location.hash === hash) render();
    else location.hash = hash;
  }

  function render() {
    const app = document.getElementById('app');
    if (!state.signedIn) {
      state.shell = null;
      for (const d of document.querySelectorAll('dialog')) d.remove();
      clear(app);
      app.dataset.state = 'signin';
      app.append(signInView());
      const input = document.getElementById('signin-token');
      if (input) input.focus();
      return;
    }
    if (!state.shell) {
      clear(app);
      state.shell = shellView();
      app.append(state.shell.el);
    }
    app.dataset.state = 'ready';
    const r = route();
    state.shell.select(r.page === 'workspace' ? 'workspaces' : r.page);
    const main = clear(state.shell.main);
    let view;
    if (r.page === 'workspaces') view = workspacesView();
    else if (r.page === 'workspace') view = workspaceView(r.ws, r.tab);
    else if (r.page === 'catalog') view = catalogView();
    else if (r.page === 'audit') view = auditView(r.ws);
    else view = h('div', { class: 'card' }, h('div', { class: 'empty' }, h('div', { class: 'empty-title' }, 'Page not found'), h('a', { href: '#/workspaces' }, 'Back to workspaces')));
    main.append(view);
    main.scrollTop = 0;
    window.scrollTo(0, 0);
  }

  async function boot() {
    window.addEventListener('hashchange', render);
    try {
      const s = await api('GET', '/session');
      state.csrf = s.csrf_token;
      state.signedIn = true;
    } catch (e) {
      state.signedIn = false;
      if (e.code === 'admin_disabled') {
        state.notice = 'The admin API is disabled on this gateway: no admin token is configured.';
      } else if (e.status !== 401) {
        state.notice = e.message;
      }
    }
    render();
  }

  // ------------------------------------------------------------------ sign-in

  function signInView() {
    const token = h('input', { id: 'signin-token', type: 'password', name: 'token', autocomplete: 'current-password',
      placeholder: 'Admin token', required: true, 'aria-label': 'Admin token', spellcheck: 'false' });
    const err = errorSlot('signin-error');
    if (state.notice) err.show(state.notice);
    const submit = h('button', { id: 'signin-submit', class: 'btn btn-primary', type: 'submit' }, 'Sign in');
    const form = h('form', { id: 'signin-form', novalidate: true }, 
      h('div', { class: 'field' }, h('label', { for: 'signin-token' }, 'Admin token'), token),
      err, submit);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.hide();
      const value = token.value.trim();
      if (!value) {
        err.show('Enter the admin token.');
        token.focus();
        return;
      }
      try {
        await busy(submit, async () => {
          const s = await api('POST', '/session', { token: value });
          state.csrf = s.csrf_token;
          state.signedIn = true;
          state.notice = null;
        });
        token.value = '';
        // Straight to the page asked for (a reload or a shared link), else the workspaces.
        if (!location.hash || location.hash === '#' || location.hash === '#/') location.hash = '#/workspaces';
        else render();
      } catch (e) {
        err.show(e.status === 401 ? `${e.message} Check the token and try again.`.replace(/^\.\s*/, '') : e.message);
        token.select();
      }
    });
    return h('div', { class: 'signin-wrap', id: 'page-signin' },
      h('div', { class: 'signin' },
        h('div', { class: 'card' },
          h('div', { class: 'card-body' },
            h('div', { class: 'brand' }, logo(30), h('div', null, h('div', { class: 'brand-name' }, 'tollgate'), h('div', { class: 'brand-sub' }, 'Admin console'))),
            h('h1', null, 'Sign in'),
            h('p', { class: 'sub' }, 'Use the gateway’s admin token. The session is kept in an HttpOnly cookie; the token itself is not stored.'),
            form)),
        h('p', { class: 'signin-foot' }, 'Served by the admin listener — never exposed on the public port.')));
  }

  // ------------------------------------------------------------------ shell

  function shellView() {
    const links = {
      workspaces: h('a', { id: 'nav-workspaces', href: '#/workspaces' }, icon('workspaces'), 'Workspaces'),
      catalog: h('a', { id: 'nav-catalog', href: '#/catalog' }, icon('catalog'), 'Catalog'),
      audit: h('a', { id: 'nav-audit', href: '#/audit' }, icon('audit'), 'Audit log'),
    };
    const signout = h('button', { id: 'signout', class: 'btn btn-side', type: 'button' }, icon('out'), 'Sign out');
    signout.addEventListener('click', async () => {
      await busy(signout, async () => {
        try { await api('DELETE', '/session'); } catch (e) { /* signed out either way */ }
      });
      state.signedIn = false;
      state.csrf = null;
      state.notice = null;
      history.replaceState(null, '', location.pathname);
      render();
    });
    const main = h('main', { id: 'main', class: 'main' });
    const el = h('div', { class: 'shell' },
      h('aside', { class: 'sidebar' },
        h('div', { class: 'brand' }, logo(28), h('div', null, h('div', { class: 'brand-name' }, 'tollgate'), h('div', { class: 'brand-sub' }, 'Admin console'))),
        h('nav', { class: 'nav', 'aria-label': 'Main' }, Object.values(links)),
        h('div', { class: 'sidebar-foot' }, h('div', { class: 'who' }, 'Signed in as admin'), signout)),
      main);
    return {
      el, main,
      select(page) {
        for (const [k, a] of Object.entries(links)) {
          a.classList.toggle('active', k === page);
          if (k === page) a.setAttribute('aria-current', 'page'); else a.removeAttribute('aria-current');
        }
      },
    };
  }

  function pageHead(title, sub, right, crumbs) {
    return h('div', { class: 'page-head' },
      h('div', null,
        crumbs ? h('div', { class: 'crumbs' }, crumbs) : null,
        typeof title === 'string' ? h('h1', null, title) : title,
        sub ? h('p', { class: 'sub' }, sub) : null),
      right || null);
  }

  // ------------------------------------------------------------------ paged tables

  /**
   * A table filled from a paged list (`{data, next_cursor}`), with a "Load more" button, a
   * loading row, an empty state and an inline error. `table.dataset.state` is
   * loading/ready/error (tests wait on it).
   */
  function pagedTable({ id, columns, path, params, row, empty, onPage, limit = PAGE }) {
    const tbody = h('tbody');
    const table = h('table', { id, class: 'table', 'data-state': 'loading' },
      h('thead', null, h('tr', null, columns.map((c) => h('th', { class: c.cls || null }, c.label)))),
      tbody);
    const base = id.replace(/-table$/, '');
    const more = h('button', { id: `${base}-load-more`, class: 'btn btn-ghost', type: 'button', hidden: true }, 'Load more');
    const foot = h('div', { class: 'card-foot', hidden: true }, more);
    const emptyBox = h('div', { id: `${base}-empty`, class: 'empty', hidden: true, 'data-testid': 'empty' });
    const err = errorSlot(`${base}-error`);
    err.style.margin = '12px 18px';
    const wrap = h('div', null, h('div', { class: 'table-wrap' }, table), emptyBox, err, foot);
    let cursor = null;
    let rows = 0;
    let generation = 0;

    async function load(reset) {
      const gen = ++generation;
      table.dataset.state = 'loading';
      err.hide();
      if (reset) {
        cursor = null;
        rows = 0;
        clear(tbody);
        emptyBox.hidden = true;
        table.hidden = false;
        tbody.append(h('tr', { class: 'loading-row' }, h('td', { colspan: columns.length }, h('span', { class: 'spinner' }), ' Loading…')));
      }
      try {
        const page = await busy(more, () => api('GET', path + query(Object.assign({}, typeof params === 'function' ? params() : params, { limit, cursor: reset ? null : cursor }))));
        if (gen !== generation) return;
        if (reset) clear(tbody);
        const data = (page && page.data) || [];
        for (const item of data) {
          const r = row(item);
          for (const tr of Array.isArray(r) ? r : [r]) tbody.append(tr);
        }
        rows += data.length;
        cursor = page ? page.next_cursor : null;
        more.hidden = !cursor;
        foot.hidden = !cursor;
        table.hidden = rows === 0;
        emptyBox.hidden = rows !== 0;
        if (rows === 0) add(clear(emptyBox), typeof empty === 'function' ? empty() : empty);
        if (onPage) onPage(page, reset);
        table.dataset.state = 'ready';
      } catch (e) {
        if (gen !== generation) return;
        if (reset) clear(tbody);
        table.hidden = rows === 0;
        err.show(e.message);
        table.dataset.state = 'error';
      }
    }

    more.addEventListener('click', () => load(false));
    load(true);
    return { el: wrap, table, tbody, reload: () => load(true) };
  }

  function emptyState(title, text, action) {
    return [h('div', { class: 'empty-title' }, title), text ? h('div', null, text) : null, action || null];
  }

  // ------------------------------------------------------------------ workspaces

  function workspacesView() {
    const name = h('input', { id: 'ws-create-name', type: 'text', placeholder: 'e.g. research-team', maxlength: 200, autocomplete: 'off' });
    const submit = h('button', { id: 'ws-create-submit', class: 'btn btn-primary', type: 'submit' }, icon('plus'), 'Create workspace');
    const err = errorSlot('ws-create-error');
    const form = h('form', { id: 'ws-create-form', novalidate: true },
      h('div', { class: 'form-row' },
        h('div', { class: 'field grow' }, h('label', { for: 'ws-create-name' }, 'Name'), name),
        submit),
      err);
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.hide();
      const value = name.value.trim();
      if (!value) { err.show('Give the workspace a name.'); name.focus(); return; }
      try {
        const ws = await busy(submit, () => api('POST', '/workspaces', { name: value }));
        toast(`Workspace “${ws.name}” created.`);
        go(`#/workspaces/${enc(ws.id)}/keys`);
      } catch (e) {
        err.show(e.message);
      }
    });

    const list = pagedTable({
      id: 'ws-table',
      path: '/workspaces',
      columns: [{ label: 'Name' }, { label: 'ID' }, { label: 'Balance', cls: 'num' }, { label: 'Created' }],
      empty: () => emptyState('No workspaces yet — create one', 'A workspace holds credit, API keys and usage.'),
      row: (ws) => h('tr', { 'data-testid': 'ws-row', 'data-id': ws.id },
        h('td', null, h('a', { href: `#/workspaces/${enc(ws.id)}/keys`, class: 'cell-title', 'data-testid': 'ws-link' }, ws.name)),
        h('td', null, h('code', { class: 'muted' }, ws.id)),
        h('td', { class: 'num mono', 'data-testid': 'ws-balance' }, usd(ws.balance)),
        timeCell(ws.created_at)),
    });

    return h('div', { id: 'page-workspaces' },
      pageHead('Workspaces', 'Each workspace has its own credit balance, API keys, usage and alerts.'),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'New workspace'))),
        h('div', { class: 'card-body' }, form)),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', null, 'All workspaces')),
        list.el));
  }

  // ------------------------------------------------------------------ one workspace

  const TABS = [['keys', 'API keys'], ['credits', 'Credits'], ['usage', 'Usage'], ['alerts', 'Alerts']];

  function workspaceView(wsId, tab) {
    if (!TABS.some(([t]) => t === tab)) tab = 'keys';
    const title = h('h1', { id: 'ws-title' }, '…');
    const balance = h('div', { id: 'ws-balance', class: 'stat-value mono' }, '…');
    const loadErr = errorSlot('ws-error');
    const ctx = {
      id: wsId,
      ws: null,
      setBalance(b) { balance.textContent = usd(b); balance.dataset.value = b; },
    };

    const renameBtn = h('button', { id: 'ws-rename-open', class: 'btn btn-ghost btn-sm', type: 'button', disabled: true }, 'Rename');
    const renameInput = h('input', { id: 'ws-rename-name', type: 'text', maxlength: 200, autocomplete: 'off', 'aria-label': 'New name' });
    const renameSave = h('button', { id: 'ws-rename-submit', class: 'btn btn-primary btn-sm', type: 'submit' }, 'Save');
    const renameCancel = h('button', { class: 'btn btn-sm', type: 'button' }, 'Cancel');
    const renameErr = errorSlot('ws-rename-error', true);
    const renameForm = h('form', { id: 'ws-rename-form', class: 'rename-form', hidden: true, novalidate: true }, renameInput, renameSave, renameCancel);
    renameBtn.addEventListener('click', () => {
      renameForm.hidden = false;
      titleLine.hidden = true;
      renameInput.value = ctx.ws ? ctx.ws.name : '';
      renameInput.focus();
      renameInput.select();
    });
    renameCancel.addEventListener('click', () => { renameForm.hidden = true; titleLine.hidden = false; renameErr.hide(); });
    renameForm.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      renameErr.hide();
      const value = renameInput.value.trim();
      if (!value) { renameErr.show('The name cannot be empty.'); return; }
      try {
        const ws = await busy(renameSave, () => api('PATCH', `/workspaces/${enc(wsId)}`, { name: value }));
        ctx.ws = ws;
        title.textContent = ws.name;
        crumbName.textContent = ws.name;
        renameForm.hidden = true;
        titleLine.hidden = false;
        toast('Workspace renamed.');
      } catch (e) {
        renameErr.show(e.message);
      }
    });

    const crumbName = h('b', null, wsId);
    const titleLine = h('div', { class: 'title-line' }, title, renameBtn);
    const created = h('span', { class: 'small', id: 'ws-created' });
    const head = h('div', { class: 'page-head' },
      h('div', null,
        h('div', { class: 'crumbs' }, h('a', { href: '#/workspaces' }, 'Workspaces'), h('span', null, '/'), crumbName),
        titleLine,
        renameForm, renameErr,
        h('div', { class: 'id-line' }, h('code', { id: 'ws-id' }, wsId), created)),
      h('div', { class: 'balance-box' }, h('div', { class: 'stat-label' }, 'Balance'), balance));

    const tabs = h('nav', { class: 'tabs', 'aria-label': 'Workspace sections' },
      TABS.map(([t, label]) => h('a', { id: `tab-${t}`, href: `#/workspaces/${enc(wsId)}/${t}`, class: t === tab ? 'active' : null, 'aria-current': t === tab ? 'page' : null }, label)));

    const body = h('div', { id: `section-${tab}` });
    api('GET', `/workspaces/${enc(wsId)}`).then((ws) => {
      ctx.ws = ws;
      title.textContent = ws.name;
      crumbName.textContent = ws.name;
      ctx.setBalance(ws.balance);
      created.textContent = `created ${when(ws.created_at)}`;
      renameBtn.disabled = false;
    }).catch((e) => {
      balance.textContent = '—';
      if (e.status === 404) {
        title.textContent = 'Workspace not found';
        renameBtn.hidden = true;
        tabs.hidden = true;
        add(clear(body), h('div', { class: 'card' }, h('div', { class: 'empty', id: 'ws-not-found' },
          emptyState('No such workspace', e.message, h('a', { class: 'btn', href: '#/workspaces' }, 'Back to workspaces')))));
      } else {
        title.textContent = 'Workspace';
        loadErr.show(e.message);
      }
    });

    if (tab === 'keys') body.append(keysSection(ctx));
    else if (tab === 'credits') body.append(creditsSection(ctx));
    else if (tab === 'usage') body.append(usageSection(ctx));
    else if (tab === 'alerts') body.append(alertsSection(ctx));

    return h('div', { id: 'page-workspace', 'data-ws': wsId }, head, loadErr, tabs, body);
  }

  // ------------------------------------------------------------------ dialogs

  /** A modal <dialog>, removed from the page when closed (so nothing it showed lingers). */
  function modal(id, build) {
    const dlg = h('dialog', { id, class: 'modal', 'aria-modal': 'true' });
    document.body.append(dlg);
    const api_ = {
      dlg,
      close() { if (dlg.open) dlg.close(); else dlg.remove(); },
      set(...content) { add(clear(dlg), content); },
    };
    dlg.addEventListener('close', () => {
      dlg.remove();
      if (api_.onClose) api_.onClose();
    });
    build(api_);
    dlg.showModal();
    const first = dlg.querySelector('[autofocus], input, select, button');
    if (first) first.focus();
    return api_;
  }

  /** An in-page confirmation: `action` runs on OK; its error shows in the dialog. */
  function confirmDialog({ title, text, ok = 'Confirm', danger = false, action }) {
    return new Promise((resolve) => {
      let done = false;
      modal('confirm-dialog', (m) => {
        const err = errorSlot('confirm-error');
        const okBtn = h('button', { id: 'confirm-ok', class: danger ? 'btn btn-danger' : 'btn btn-primary', type: 'button' }, ok);
        const cancel = h('button', { id: 'confirm-cancel', class: 'btn', type: 'button', autofocus: true }, 'Cancel');
        cancel.addEventListener('click', () => m.close());
        okBtn.addEventListener('click', async () => {
          err.hide();
          try {
            const out = await busy(okBtn, action);
            done = true;
            m.close();
            resolve(out);
          } catch (e) {
            err.show(e.message);
          }
        });
        m.onClose = () => { if (!done) resolve(undefined); };
        m.set(
          h('div', { class: 'modal-head' }, h('h2', null, title)),
          h('div', { class: 'modal-body' }, h('p', null, text), err),
          h('div', { class: 'modal-foot' }, cancel, okBtn));
      });
    });
  }

  /** Shows a new key's secret in dialog `m`, once, with a Copy button. Closing the dialog
   *  removes it from the page, secret included. */
  function showSecret(m, { title, secret, key, note, lost = 'If it is lost, rotate the key.' }) {
    const copyBtn = h('button', { id: 'key-secret-copy', class: 'btn btn-sm', type: 'button' }, icon('copy', 14), 'Copy');
    const code = h('code', { id: 'key-secret', 'data-testid': 'key-secret' }, secret);
    const copied = h('div', { id: 'key-secret-copied', class: 'copied', role: 'status' });
    copyBtn.addEventListener('click', async () => {
      try {
        if (!navigator.clipboard || !window.isSecureContext) throw new Error('no clipboard');
        await navigator.clipboard.writeText(secret);
        copied.textContent = 'Copied to the clipboard.';
        copyBtn.lastChild.textContent = 'Copied';
      } catch (_) {
        const range = document.createRange();
        range.selectNodeContents(code);
        const sel = window.getSelection();
        sel.removeAllRanges();
        sel.addRange(range);
        copied.textContent = 'The browser refused the clipboard: the secret is selected, press Ctrl+C (⌘C) to copy it.';
      }
    });
    const done = h('button', { id: 'key-secret-done', class: 'btn btn-primary', type: 'button' }, 'I have copied it — close');
    done.addEventListener('click', () => m.close());
    m.set(
      h('div', { class: 'modal-head' }, h('h2', null, title),
        h('p', { class: 'sub' }, key ? ['Key ', h('b', null, key.name || key.id), ' ', h('code', { class: 'muted' }, key.hint || '')] : null)),
      h('div', { class: 'modal-body', id: 'key-secret-view' },
        h('div', { class: 'warning', id: 'key-secret-warning' }, icon('warn', 18),
          h('div', null, h('strong', null, 'Copy this secret now — it cannot be shown again.'),
            `tollgate keeps only a hash of it. ${lost}`)),
        h('div', { class: 'secret-box' }, code, copyBtn),
        copied,
        note ? h('p', { class: 'notice' }, note) : null),
      h('div', { class: 'modal-foot' }, done));
    done.focus();
  }

  // ------------------------------------------------------------------ keys

  const STATUS_LABEL = { active: 'active', expired: 'expired', revoked: 'revoked', spend_limited: 'spend limited' };
  const RESET_LABEL = { daily: 'resets daily', weekly: 'resets weekly', monthly: 'resets monthly' };

  function keysSection(ctx) {
    const openBtn = h('button', { id: 'key-create-open', class: 'btn btn-primary', type: 'button' }, icon('plus'), 'Create key');
    const list = pagedTable({
      id: 'keys-table',
      path: `/workspaces/${enc(ctx.id)}/keys`,
      columns: [{ label: 'Name' }, { label: 'Key' }, { label: 'Status' }, { label: 'Spend (window / limit)' }, { label: 'Expires' }, { label: '', cls: 'num' }],
      empty: () => emptyState('No keys yet — create one', 'Keys authenticate requests to the gateway’s public API and bill this workspace.',
        h('button', { class: 'btn btn-primary', type: 'button', id: 'key-create-empty', onclick: () => createKeyDialog(ctx, list) }, icon('plus'), 'Create key')),
      row: (k) => keyRow(ctx, k, () => list.reload()),
    });
    openBtn.addEventListener('click', () => createKeyDialog(ctx, list));
    return h('div', null,
      h('div', { class: 'card', id: 'keys-card' },
        h('div', { class: 'card-head' },
          h('div', null, h('h2', null, 'API keys'), h('p', { class: 'sub' }, 'Secrets are shown once, at creation or rotation.')),
          openBtn),
        list.el),
      managementKeysSection(ctx));
  }

  /** Model patterns typed one per line or separated by commas or spaces. */
  function patternsOf(text) {
    return text.split(/[\s,]+/).map((p) => p.trim()).filter(Boolean);
  }

  function modelsLine(k) {
    const list = k.allowed_models || [];
    return h('div', { class: 'cell-sub', 'data-testid': 'key-models', title: list.length ? list.join('\n') : null },
      list.length ? `models: ${list.join(', ')}` : 'all models');
  }

  function spendCell(k) {
    if (k.spend_limit_usd === null || k.spend_limit_usd === undefined) {
      return h('td', { 'data-testid': 'key-spend' }, h('span', { class: 'muted' }, 'No limit'));
    }
    const spent = k.spend_usd ?? '0';
    const ratio = Number(spent) / Number(k.spend_limit_usd);
    const pct = Number.isFinite(ratio) ? Math.max(0, Math.min(1, ratio)) : 1;
    const bar = h('span');
    bar.style.width = `${(pct * 100).toFixed(1)}%`;
    const meter = h('div', { class: pct >= 1 ? 'meter full' : pct >= 0.8 ? 'meter hot' : 'meter', title: `${(ratio * 100 || 0).toFixed(1)}% of the limit` }, bar);
    return h('td', { 'data-testid': 'key-spend' },
      h('div', { class: 'mono nowrap' }, usd(spent), h('span', { class: 'muted' }, ' / '), usd(k.spend_limit_usd)),
      meter,
      h('div', { class: 'cell-sub', title: k.window_start ? `window since ${when(k.window_start)}` : null }, RESET_LABEL[k.limit_reset] || 'lifetime limit'));
  }

  function keyRow(ctx, k, reload) {
    const status = k.status || 'active';
    const actions = h('div', { class: 'actions' });
    if (status !== 'revoked') {
      const edit = h('button', { class: 'btn btn-ghost btn-sm', type: 'button', 'data-testid': 'key-edit' }, 'Edit');
      edit.addEventListener('click', () => editKeyDialog(k, (out) => tr.replaceWith(keyRow(ctx, out, reload))));
      const rotate = h('button', { class: 'btn btn-ghost btn-sm', type: 'button', 'data-testid': 'key-rotate' }, 'Rotate');
      rotate.addEventListener('click', () => rotateKeyDialog(k, reload));
      const revoke = h('button', { class: 'btn btn-ghost btn-sm btn-link-danger', type: 'button', 'data-testid': 'key-revoke' }, 'Revoke');
      revoke.addEventListener('click', async () => {
        const out = await confirmDialog({
          title: 'Revoke this key?',
          text: `Requests using “${k.name || k.hint}” (${k.hint}) will be refused within seconds. This cannot be undone.`,
          ok: 'Revoke key',
          danger: true,
          action: () => api('POST', `/keys/${enc(k.id)}/revoke`),
        });
        if (out) {
          toast(`Key “${k.name || k.hint}” revoked.`);
          tr.replaceWith(keyRow(ctx, out, reload));
        }
      });
      add(actions, edit, rotate, revoke);
    }
    const tr = h('tr', { 'data-testid': 'key-row', 'data-key-id': k.id, 'data-status': status },
      h('td', null,
        h('div', { class: 'cell-title', 'data-testid': 'key-name' }, k.name || h('span', { class: 'muted' }, 'unnamed')),
        h('div', { class: 'cell-sub nowrap', title: k.created_at || '' }, `created ${whenShort(k.created_at)}`),
        modelsLine(k)),
      h('td', null,
        h('code', { class: 'nowrap', 'data-testid': 'key-hint' }, k.hint || ''),
        h('div', { class: 'cell-sub mono id-wrap' }, k.id)),
      h('td', null, badge(status, STATUS_LABEL[status] || status, { 'data-testid': 'key-status', title: k.revoked_at ? `revoked ${when(k.revoked_at)}` : null })),
      spendCell(k),
      h('td', { class: 'nowrap', title: k.expires_at || '' }, k.expires_at ? whenShort(k.expires_at) : h('span', { class: 'muted' }, 'Never')),
      h('td', { class: 'num' }, actions));
    return tr;
  }

  function createKeyDialog(ctx, list) {
    modal('key-dialog', (m) => {
      const name = h('input', { id: 'key-name', type: 'text', maxlength: 200, placeholder: 'e.g. production-backend', autocomplete: 'off', autofocus: true });
      const expires = h('input', { id: 'key-expires', type: 'datetime-local' });
      const limit = h('input', { id: 'key-limit', type: 'text', inputmode: 'decimal', placeholder: 'e.g. 25.00', autocomplete: 'off' });
      const reset = h('select', { id: 'key-reset' },
        h('option', { value: '' }, 'Never (lifetime)'),
        h('option', { value: 'daily' }, 'Daily'),
        h('option', { value: 'weekly' }, 'Weekly'),
        h('option', { value: 'monthly' }, 'Monthly'));
      const models = h('textarea', { id: 'key-models', rows: 2, placeholder: 'e.g. google/gemini-*', autocomplete: 'off', spellcheck: 'false' });
      const err = errorSlot('key-create-error');
      const submit = h('button', { id: 'key-create-submit', class: 'btn btn-primary', type: 'submit' }, 'Create key');
      const cancel = h('button', { class: 'btn', type: 'button', id: 'key-create-cancel' }, 'Cancel');
      cancel.addEventListener('click', () => m.close());
      const form = h('form', { id: 'key-create-form', novalidate: true },
        h('div', { class: 'modal-head' }, h('h2', null, 'Create an API key'), h('p', { class: 'sub' }, 'For workspace ', h('b', null, ctx.ws ? ctx.ws.name : ctx.id), '.')),
        h('div', { class: 'modal-body' },
          h('div', { class: 'fields' },
            h('div', { class: 'field full' }, h('label', { for: 'key-name' }, 'Name'), name),
            h('div', { class: 'field full' }, h('label', { for: 'key-expires' }, 'Expires'), expires, h('span', { class: 'hint' }, 'Optional, your local time. Leave empty for a key that never expires.')),
            h('div', { class: 'field' }, h('label', { for: 'key-limit' }, 'Spend limit (USD)'), limit, h('span', { class: 'hint' }, 'Optional.')),
            h('div', { class: 'field' }, h('label', { for: 'key-reset' }, 'Limit resets'), reset),
            h('div', { class: 'field full' }, h('label', { for: 'key-models' }, 'Allowed models'), models, modelsHint())),
          err),
        h('div', { class: 'modal-foot' }, cancel, submit));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.hide();
        const body = {};
        if (name.value.trim()) body.name = name.value.trim();
        const allowed = patternsOf(models.value);
        if (allowed.length) body.allowed_models = allowed;
        if (expires.value) {
          const d = new Date(expires.value);
          if (Number.isNaN(d.getTime())) { err.show('The expiry is not a valid date and time.'); return; }
          body.expires_at = d.toISOString();
        }
        const lim = limit.value.trim().replace(/^\$/, '');
        if (lim) {
          if (!isDecimal(lim)) { err.show('The spend limit must be a decimal amount of USD, like 25 or 12.50.'); limit.focus(); return; }
          body.spend_limit_usd = lim;
          if (reset.value) body.limit_reset = reset.value;
        } else if (reset.value) {
          err.show('A reset period needs a spend limit.');
          limit.focus();
          return;
        }
        try {
          const out = await busy(submit, () => api('POST', `/workspaces/${enc(ctx.id)}/keys`, body));
          m.onClose = () => list.reload();
          showSecret(m, { title: 'Key created', secret: out.secret, key: out.key });
        } catch (e) {
          err.show(e.message);
        }
      });
      m.set(form);
    });
  }

  function modelsHint() {
    return h('span', { class: 'hint' }, 'Optional: model ids the key may call, one per line or separated by commas; * matches anything (google/gemini-*). Empty: every model.');
  }

  /** Changes a key's name, model allowlist or spend limit (`PATCH /keys/{id}`); `done` gets
   *  the key as it is now. A limit's period, once set, is fixed. */
  function editKeyDialog(k, done) {
    modal('key-edit-dialog', (m) => {
      const name = h('input', { id: 'key-edit-name', type: 'text', maxlength: 200, autocomplete: 'off', value: k.name || '' });
      const models = h('textarea', { id: 'key-edit-models', rows: 3, autocomplete: 'off', spellcheck: 'false' });
      models.value = (k.allowed_models || []).join('\n');
      const limit = h('input', { id: 'key-edit-limit', type: 'text', inputmode: 'decimal', autocomplete: 'off', value: k.spend_limit_usd || '', placeholder: 'e.g. 25.00' });
      const reset = h('select', { id: 'key-edit-reset', disabled: !!k.limit_reset },
        ['daily', 'weekly', 'monthly'].map((r) => h('option', { value: r, selected: k.limit_reset === r }, r[0].toUpperCase() + r.slice(1))));
      const err = errorSlot('key-edit-error');
      const submit = h('button', { id: 'key-edit-submit', class: 'btn btn-primary', type: 'submit' }, 'Save');
      const cancel = h('button', { class: 'btn', type: 'button' }, 'Cancel');
      cancel.addEventListener('click', () => m.close());
      const form = h('form', { id: 'key-edit-form', novalidate: true },
        h('div', { class: 'modal-head' }, h('h2', null, 'Edit key'),
          h('p', { class: 'sub' }, h('code', { class: 'muted' }, k.hint || ''), ' — changes reach every gateway within seconds.')),
        h('div', { class: 'modal-body' },
          h('div', { class: 'fields' },
            h('div', { class: 'field full' }, h('label', { for: 'key-edit-name' }, 'Name'), name),
            h('div', { class: 'field full' }, h('label', { for: 'key-edit-models' }, 'Allowed models'), models, modelsHint()),
            h('div', { class: 'field' }, h('label', { for: 'key-edit-limit' }, 'Spend limit (USD)'), limit,
              h('span', { class: 'hint' }, k.spend_limit_usd ? 'Raise or lower it; it cannot be removed.' : 'Optional.')),
            h('div', { class: 'field' }, h('label', { for: 'key-edit-reset' }, 'Limit resets'), reset,
              k.limit_reset ? h('span', { class: 'hint' }, 'Fixed once set.') : null)),
          err),
        h('div', { class: 'modal-foot' }, cancel, submit));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.hide();
        const body = { name: name.value.trim() || null, allowed_models: patternsOf(models.value) };
        const lim = limit.value.trim().replace(/^\$/, '');
        if (lim && lim !== k.spend_limit_usd) {
          if (!isDecimal(lim)) { err.show('The spend limit must be a decimal amount of USD, like 25 or 12.50.'); limit.focus(); return; }
          body.spend_limit_usd = lim;
          if (!k.limit_reset) body.limit_reset = reset.value;
        } else if (!lim && k.spend_limit_usd) {
          err.show('A spend limit cannot be removed; set another amount.');
          limit.focus();
          return;
        }
        try {
          const out = await busy(submit, () => api('PATCH', `/keys/${enc(k.id)}`, body));
          m.close();
          toast(`Key “${out.name || out.hint}” saved.`);
          done(out);
        } catch (e) {
          err.show(e.message);
        }
      });
      m.set(form);
    });
  }

  // ------------------------------------------------------------------ management keys

  const MKEY_STATUS = { active: 'active', expired: 'expired', revoked: 'revoked' };

  /** A workspace's management keys: admin API credentials limited to its API keys, usage and
   *  balance (for a reseller's backend). Created here (the secret shown once), listed, revoked. */
  function managementKeysSection(ctx) {
    const openBtn = h('button', { id: 'mkey-create-open', class: 'btn', type: 'button' }, icon('plus'), 'Create management key');
    const list = pagedTable({
      id: 'mkeys-table',
      path: `/workspaces/${enc(ctx.id)}/management-keys`,
      columns: [{ label: 'Name' }, { label: 'Key' }, { label: 'Status' }, { label: 'Expires' }, { label: '', cls: 'num' }],
      empty: () => emptyState('No management keys', 'A management key lets a backend create, change and revoke this workspace’s API keys and read its usage and balance — nothing else.'),
      row: (k) => managementKeyRow(k, () => list.reload()),
    });
    openBtn.addEventListener('click', () => createManagementKeyDialog(ctx, list));
    return h('div', { class: 'card', id: 'mkeys-card' },
      h('div', { class: 'card-head' },
        h('div', null, h('h2', null, 'Management keys'),
          h('p', { class: 'sub' }, 'Admin API credentials for this workspace only: its API keys, usage and balance.')),
        openBtn),
      list.el);
  }

  function managementKeyRow(k, reload) {
    const status = k.status || 'active';
    const actions = h('div', { class: 'actions' });
    if (status !== 'revoked') {
      const revoke = h('button', { class: 'btn btn-ghost btn-sm btn-link-danger', type: 'button', 'data-testid': 'mkey-revoke' }, 'Revoke');
      revoke.addEventListener('click', async () => {
        const out = await confirmDialog({
          title: 'Revoke this management key?',
          text: `Calls made with “${k.name || k.hint}” (${k.hint}) will be refused at once. This cannot be undone.`,
          ok: 'Revoke key',
          danger: true,
          action: () => api('POST', `/management-keys/${enc(k.id)}/revoke`),
        });
        if (out) {
          toast(`Management key “${k.name || k.hint}” revoked.`);
          tr.replaceWith(managementKeyRow(out, reload));
        }
      });
      actions.append(revoke);
    }
    const tr = h('tr', { 'data-testid': 'mkey-row', 'data-key-id': k.id, 'data-status': status },
      h('td', null,
        h('div', { class: 'cell-title', 'data-testid': 'mkey-name' }, k.name || h('span', { class: 'muted' }, 'unnamed')),
        h('div', { class: 'cell-sub nowrap', title: k.created_at || '' }, `created ${whenShort(k.created_at)}`)),
      h('td', null,
        h('code', { class: 'nowrap', 'data-testid': 'mkey-hint' }, k.hint || ''),
        h('div', { class: 'cell-sub mono id-wrap' }, k.id)),
      h('td', null, badge(status, MKEY_STATUS[status] || status, { 'data-testid': 'mkey-status', title: k.revoked_at ? `revoked ${when(k.revoked_at)}` : null })),
      h('td', { class: 'nowrap', title: k.expires_at || '' }, k.expires_at ? whenShort(k.expires_at) : h('span', { class: 'muted' }, 'Never')),
      h('td', { class: 'num' }, actions));
    return tr;
  }

  function createManagementKeyDialog(ctx, list) {
    modal('mkey-dialog', (m) => {
      const name = h('input', { id: 'mkey-name', type: 'text', maxlength: 200, placeholder: 'e.g. billing-backend', autocomplete: 'off', autofocus: true });
      const expires = h('input', { id: 'mkey-expires', type: 'datetime-local' });
      const err = errorSlot('mkey-create-error');
      const submit = h('button', { id: 'mkey-create-submit', class: 'btn btn-primary', type: 'submit' }, 'Create management key');
      const cancel = h('button', { class: 'btn', type: 'button' }, 'Cancel');
      cancel.addEventListener('click', () => m.close());
      const form = h('form', { id: 'mkey-create-form', novalidate: true },
        h('div', { class: 'modal-head' }, h('h2', null, 'Create a management key'), h('p', { class: 'sub' }, 'For workspace ', h('b', null, ctx.ws ? ctx.ws.name : ctx.id), ' only.')),
        h('div', { class: 'modal-body' },
          h('div', { class: 'fields' },
            h('div', { class: 'field full' }, h('label', { for: 'mkey-name' }, 'Name'), name),
            h('div', { class: 'field full' }, h('label', { for: 'mkey-expires' }, 'Expires'), expires, h('span', { class: 'hint' }, 'Optional, your local time. Leave empty for a key that never expires.'))),
          err),
        h('div', { class: 'modal-foot' }, cancel, submit));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.hide();
        const body = {};
        if (name.value.trim()) body.name = name.value.trim();
        if (expires.value) {
          const d = new Date(expires.value);
          if (Number.isNaN(d.getTime())) { err.show('The expiry is not a valid date and time.'); return; }
          body.expires_at = d.toISOString();
        }
        try {
          const out = await busy(submit, () => api('POST', `/workspaces/${enc(ctx.id)}/management-keys`, body));
          m.onClose = () => list.reload();
          showSecret(m, {
            title: 'Management key created',
            secret: out.secret,
            key: out.key,
            note: 'Send it as Authorization: Bearer to the admin API (/admin/v1) to manage this workspace’s API keys and read its usage and balance.',
            lost: 'If it is lost, revoke it and create another.',
          });
        } catch (e) {
          err.show(e.message);
        }
      });
      m.set(form);
    });
  }

  function rotateKeyDialog(k, reload) {
    modal('rotate-dialog', (m) => {
      const grace = h('select', { id: 'rotate-grace' },
        h('option', { value: '0' }, 'No grace: revoke the old key now'),
        h('option', { value: '300' }, '5 minutes'),
        h('option', { value: '3600' }, '1 hour'),
        h('option', { value: '86400' }, '24 hours'),
        h('option', { value: '604800' }, '7 days'));
      const err = errorSlot('rotate-error');
      const submit = h('button', { id: 'rotate-submit', class: 'btn btn-primary', type: 'submit' }, 'Rotate key');
      const cancel = h('button', { class: 'btn', type: 'button' }, 'Cancel');
      cancel.addEventListener('click', () => m.close());
      const form = h('form', { id: 'rotate-form', novalidate: true },
        h('div', { class: 'modal-head' }, h('h2', null, 'Rotate key'),
          h('p', { class: 'sub' }, 'A new secret replaces ', h('b', null, k.name || k.id), ' ', h('code', { class: 'muted' }, k.hint || ''), '; name and limits carry over.')),
        h('div', { class: 'modal-body' },
          h('div', { class: 'field' }, h('label', { for: 'rotate-grace' }, 'Grace period for the old secret'), grace,
            h('span', { class: 'hint' }, 'During the grace period both secrets work, so clients can switch without downtime.')),
          err),
        h('div', { class: 'modal-foot' }, cancel, submit));
      form.addEventListener('submit', async (ev) => {
        ev.preventDefault();
        err.hide();
        const seconds = Number(grace.value);
        try {
          const out = await busy(submit, () => api('POST', `/keys/${enc(k.id)}/rotate`, seconds > 0 ? { grace_seconds: seconds } : {}));
          m.onClose = reload;
          const old = out.old || {};
          const note = seconds > 0
            ? `The old secret keeps working until ${old.expires_at ? when(old.expires_at) : 'the grace period ends'}.`
            : 'The old secret was revoked.';
          showSecret(m, { title: 'Key rotated', secret: out.secret, key: out.key, note });
        } catch (e) {
          err.show(e.message);
        }
      });
      m.set(form);
    });
  }

  // ------------------------------------------------------------------ credits

  function creditsSection(ctx) {
    const amount = h('input', { id: 'credit-amount', type: 'text', inputmode: 'decimal', placeholder: '10.00', autocomplete: 'off' });
    const note = h('input', { id: 'credit-note', type: 'text', maxlength: 500, placeholder: 'e.g. invoice 2031', autocomplete: 'off' });
    const submit = h('button', { id: 'credit-submit', class: 'btn btn-primary', type: 'submit' }, icon('plus'), 'Add credit');
    const err = errorSlot('credit-error');
    const form = h('form', { id: 'credit-form', novalidate: true },
      h('div', { class: 'form-row' },
        h('div', { class: 'field' }, h('label', { for: 'credit-amount' }, 'Amount (USD)'), amount),
        h('div', { class: 'field grow' }, h('label', { for: 'credit-note' }, 'Note'), note),
        submit),
      err);

    const ledger = pagedTable({
      id: 'ledger-table',
      path: `/workspaces/${enc(ctx.id)}/credits`,
      columns: [{ label: 'Time' }, { label: 'Kind' }, { label: 'Amount', cls: 'num' }, { label: 'Note' }, { label: 'Entry' }],
      empty: () => emptyState('No ledger entries yet', 'Add credit above; requests then debit the balance.'),
      onPage: (page) => { if (page && page.balance !== undefined) ctx.setBalance(page.balance); },
      row: (e) => {
        const amt = String(e.amount ?? '').replace(/^[+-]/, '');
        const neg = e.kind === 'debit' || String(e.amount).startsWith('-');
        return h('tr', { 'data-testid': 'ledger-row', 'data-kind': e.kind, 'data-id': e.id },
          timeCell(e.created_at),
          h('td', null, badge(e.kind === 'credit' ? 'credit' : 'debit', e.kind)),
          h('td', { class: 'num mono', 'data-testid': 'ledger-amount' }, neg ? usd('-' + amt) : usd(amt, { sign: true })),
          h('td', null, e.note || h('span', { class: 'muted' }, '—')),
          h('td', null, h('code', { class: 'muted' }, e.id), e.usage_id ? h('div', { class: 'cell-sub mono' }, 'usage ', e.usage_id) : null));
      },
    });

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.hide();
      const value = amount.value.trim().replace(/^\$/, '');
      if (!isDecimal(value) || !/[1-9]/.test(value)) {
        err.show('Enter a positive amount of USD, like 10 or 2.50.');
        amount.setAttribute('aria-invalid', 'true');
        amount.focus();
        return;
      }
      amount.removeAttribute('aria-invalid');
      const body = { amount_usd: value };
      if (note.value.trim()) body.note = note.value.trim();
      try {
        const out = await busy(submit, () => api('POST', `/workspaces/${enc(ctx.id)}/credits`, body));
        ctx.setBalance(out.balance);
        amount.value = '';
        note.value = '';
        toast(`Added ${usd(value)}. Balance ${usd(out.balance)}.`);
        ledger.reload();
      } catch (e) {
        err.show(e.message);
      }
    });

    return h('div', null,
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'Top up'), h('p', { class: 'sub' }, 'Credit is exact to the picodollar; requests are refused when the balance runs out.'))),
        h('div', { class: 'card-body' }, form)),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', null, 'Ledger')),
        ledger.el));
  }

  // ------------------------------------------------------------------ usage

  const PALETTE = ['#4f46e5', '#0ea5e9', '#f59e0b', '#10b981', '#ef4444', '#8b5cf6', '#ec4899', '#14b8a6', '#84cc16', '#64748b'];

  function utcDay(d) { return d.toISOString().slice(0, 10); }

  function daysBetween(from, to) {
    const out = [];
    const d = new Date(from + 'T00:00:00Z');
    const end = new Date(to + 'T00:00:00Z');
    while (d <= end && out.length < 400) {
      out.push(utcDay(d));
      d.setUTCDate(d.getUTCDate() + 1);
    }
    return out;
  }

  function niceCeil(v) {
    if (!(v > 0)) return 1;
    const exp = Math.floor(Math.log10(v));
    const base = 10 ** exp;
    for (const m of [1, 2, 2.5, 5, 10]) if (m * base >= v - 1e-15) return m * base;
    return 10 * base;
  }

  function axisUsd(v) {
    if (v === 0) return '$0';
    if (v >= 100) return '$' + Math.round(v).toLocaleString('en-US');
    if (v >= 1) return '$' + v.toFixed(2).replace(/\.?0+$/, '');
    return '$' + numberText(Number(v.toPrecision(2)));
  }

  function axisCount(v) {
    if (v >= 1e9) return (v / 1e9).toFixed(v % 1e9 ? 1 : 0) + 'B';
    if (v >= 1e6) return (v / 1e6).toFixed(v % 1e6 ? 1 : 0) + 'M';
    if (v >= 1e3) return (v / 1e3).toFixed(v % 1e3 ? 1 : 0) + 'k';
    return String(Math.round(v * 100) / 100);
  }

  const MONTHS = ['Jan', 'Feb', 'Mar', 'Apr', 'May', 'Jun', 'Jul', 'Aug', 'Sep', 'Oct', 'Nov', 'Dec'];
  function dayLabel(day) {
    const [, m, d] = day.split('-');
    return `${MONTHS[Number(m) - 1]} ${Number(d)}`;
  }

  /**
   * A stacked bar chart: `series` is [{model, color}], `value(day, model)` a number,
   * `label(day, model)` the bar's tooltip. Bars carry data-testid="bar".
   */
  function barChart({ id, days, series, value, label, axis, title }) {
    const W = 560;
    const H = 230;
    const totals = days.map((d) => series.reduce((a, sr) => a + (value(d, sr.model) || 0), 0));
    const top = Math.max(0, ...totals);
    // A round step (1, 2, 2.5 or 5 × 10^k) and at most four steps above zero.
    const step = niceCeil(top / 4);
    const ticks = top > 0 ? Math.max(1, Math.ceil(top / step - 1e-9)) : 4;
    const max = step * ticks;
    const tickLabels = Array.from({ length: ticks + 1 }, (_, i) => axis(Number((step * i).toPrecision(12))));
    // Room for the longest y label (about 6.5 px a character at 11 px).
    const m = { l: Math.max(36, 14 + 6.5 * Math.max(...tickLabels.map((l) => l.length))), r: 12, t: 12, b: 28 };
    const cw = W - m.l - m.r;
    const ch = H - m.t - m.b;
    const svg = s('svg', { id, viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-label': title, 'data-testid': 'chart' });
    svg.append(s('title', { text: title }));
    const grid = s('g', { class: 'grid' });
    const axisG = s('g', { class: 'axis' });
    for (let i = 0; i <= ticks; i++) {
      const y = m.t + ch - (ch * i) / ticks;
      if (i > 0) grid.append(s('line', { x1: m.l, x2: W - m.r, y1: y, y2: y }));
      axisG.append(s('text', { x: m.l - 8, y: y + 4, 'text-anchor': 'end', text: tickLabels[i] }));
    }
    svg.append(grid);
    const slot = cw / Math.max(1, days.length);
    const bw = Math.max(2, Math.min(26, slot * 0.7));
    const every = Math.max(1, Math.ceil(days.length / 8));
    days.forEach((day, i) => {
      const x = m.l + slot * i + (slot - bw) / 2;
      if ((days.length - 1 - i) % every === 0) {
        axisG.append(s('text', { x: x + bw / 2, y: H - 8, 'text-anchor': 'middle', text: dayLabel(day) }));
      }
      let y = m.t + ch;
      for (const sr of series) {
        const v = value(day, sr.model) || 0;
        if (!(v > 0)) continue;
        const bh = Math.max(1, (v / max) * ch);
        y -= bh;
        svg.append(s('rect', { class: 'bar', x: x.toFixed(2), y: y.toFixed(2), width: bw.toFixed(2), height: bh.toFixed(2), rx: 1.5,
          fill: sr.color, 'data-testid': 'bar', dataset: { day, model: sr.model } }, s('title', { text: label(day, sr.model) })));
      }
    });
    svg.append(s('line', { class: 'baseline', x1: m.l, x2: W - m.r, y1: m.t + ch, y2: m.t + ch }));
    svg.append(axisG);
    if (totals.every((t) => t === 0)) {
      svg.append(s('text', { class: 'empty-text', x: m.l + cw / 2, y: m.t + ch / 2, 'text-anchor': 'middle', text: 'No usage in this period' }));
    }
    return svg;
  }

  function usageSection(ctx) {
    const range = h('select', { id: 'usage-range', 'aria-label': 'Period' },
      h('option', { value: '7' }, 'Last 7 days'),
      h('option', { value: '30', selected: true }, 'Last 30 days'),
      h('option', { value: '90' }, 'Last 90 days'));
    range.value = '30';
    const refresh = h('button', { id: 'usage-refresh', class: 'btn', type: 'button' }, icon('refresh', 14), 'Refresh');
    const stats = h('div', { class: 'stats', id: 'usage-stats' });
    const costBox = h('div', { class: 'chart card-body', id: 'usage-cost' });
    const tokBox = h('div', { class: 'chart card-body', id: 'usage-tokens' });
    const legend = h('div', { class: 'legend', id: 'usage-legend' });
    const legend2 = h('div', { class: 'legend' });
    const chartErr = errorSlot('usage-chart-error');
    const charts = h('div', { id: 'usage-charts', 'data-state': 'loading' },
      chartErr,
      h('div', { class: 'grid-2 stack-gap' },
        h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'Cost per day'), h('p', { class: 'sub' }, 'USD, by model (UTC days)'))), costBox, legend),
        h('div', { class: 'card' }, h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'Tokens per day'), h('p', { class: 'sub' }, 'Input + output tokens, by model'))), tokBox, legend2)));

    function stat(label, value, id) {
      return h('div', { class: 'stat' }, h('div', { class: 'stat-label' }, label), h('div', { class: 'stat-value mono', id }, value));
    }

    async function loadCharts() {
      charts.dataset.state = 'loading';
      chartErr.hide();
      const n = Number(range.value);
      const to = new Date();
      const from = new Date(to.getTime() - (n - 1) * 86400000);
      const fromDay = utcDay(from);
      const toDay = utcDay(to);
      for (const box of [costBox, tokBox]) {
        if (!box.firstChild) box.append(h('div', { class: 'empty' }, h('span', { class: 'spinner' }), ' Loading…'));
      }
      try {
        const out = await api('GET', `/workspaces/${enc(ctx.id)}/usage/daily${query({ from: fromDay, to: toDay })}`);
        const rows = (out && out.data) || [];
        const days = daysBetween(fromDay, toDay);
        const byKey = new Map();
        const modelCost = new Map();
        let totalCost = 0n;
        let reqs = 0;
        let tokIn = 0;
        let tokOut = 0;
        for (const r of rows) {
          byKey.set(`${r.day}|${r.model_id}`, r);
          const c = toPico(r.cost);
          modelCost.set(r.model_id, (modelCost.get(r.model_id) || 0n) + c + 1n);
          totalCost += c;
          reqs += Number(r.requests) || 0;
          tokIn += Number(r.input_tokens) || 0;
          tokOut += Number(r.output_tokens) || 0;
          if (!days.includes(r.day)) days.push(r.day);
        }
        days.sort();
        const models = [...modelCost.keys()].sort((a, b) => (modelCost.get(b) > modelCost.get(a) ? 1 : modelCost.get(b) < modelCost.get(a) ? -1 : a.localeCompare(b)));
        const series = models.map((model, i) => ({ model, color: PALETTE[i % PALETTE.length] }));
        const cell = (d, model) => byKey.get(`${d}|${model}`);
        clear(costBox).append(barChart({
          id: 'usage-chart-cost', days, series, axis: axisUsd, title: 'Cost per day by model',
          value: (d, model) => { const r = cell(d, model); return r ? Number(r.cost) : 0; },
          label: (d, model) => { const r = cell(d, model); return `${d} · ${model}: ${usd(r.cost)} (${int(r.requests)} requests)`; },
        }));
        clear(tokBox).append(barChart({
          id: 'usage-chart-tokens', days, series, axis: axisCount, title: 'Tokens per day by model',
          value: (d, model) => { const r = cell(d, model); return r ? (Number(r.input_tokens) || 0) + (Number(r.output_tokens) || 0) : 0; },
          label: (d, model) => { const r = cell(d, model); return `${d} · ${model}: ${int(r.input_tokens)} in, ${int(r.output_tokens)} out`; },
        }));
        for (const lg of [legend, legend2]) {
          clear(lg);
          if (series.length === 0) lg.append(h('span', { class: 'muted' }, 'No models used in this period.'));
          for (const sr of series) {
            const sw = h('span', { class: 'swatch' });
            sw.style.background = sr.color;
            lg.append(h('span', { 'data-testid': 'legend-item', 'data-model': sr.model }, sw, sr.model));
          }
        }
        add(clear(stats),
          stat('Requests', int(reqs), 'usage-total-requests'),
          stat('Cost', usd(fromPico(totalCost)), 'usage-total-cost'),
          stat('Input tokens', int(tokIn), 'usage-total-in'),
          stat('Output tokens', int(tokOut), 'usage-total-out'));
        charts.dataset.state = 'ready';
      } catch (e) {
        clear(costBox);
        clear(tokBox);
        chartErr.show(e.message);
        charts.dataset.state = 'error';
      }
    }

    const recent = pagedTable({
      id: 'usage-table',
      path: `/workspaces/${enc(ctx.id)}/usage`,
      columns: [{ label: 'Time' }, { label: 'Model' }, { label: 'Route' }, { label: 'Tokens in', cls: 'num' }, { label: 'Tokens out', cls: 'num' }, { label: 'Cost', cls: 'num' }, { label: 'Outcome' }, { label: 'Request ID' }],
      empty: () => emptyState('No requests yet', 'Requests made with this workspace’s keys appear here.'),
      row: (u) => {
        const inTitle = `uncached/total input ${int(u.input_tokens)}, cache read ${int(u.cache_read_tokens)}, cache write ${int(u.cache_write_tokens)}`;
        const outTitle = `output ${int(u.output_tokens)}, of which reasoning ${int(u.reasoning_tokens)}`;
        const outcome = String(u.outcome ?? '');
        const kind = /^(ok|success|complete|completed)$/i.test(outcome) ? 'ok' : /cancel|disconnect|partial/i.test(outcome) ? 'warn' : outcome ? 'error' : 'neutral';
        return h('tr', { 'data-testid': 'usage-row', 'data-request-id': u.request_id || '' },
          timeCell(u.finished_at || u.started_at),
          h('td', null, h('span', { class: 'mono', 'data-testid': 'usage-model' }, u.model_id || ''), u.stream ? h('div', { class: 'cell-sub' }, 'stream') : null),
          h('td', null, h('span', { class: 'small' }, routeText(u.route)), u.endpoint ? h('div', { class: 'cell-sub' }, u.endpoint) : null),
          h('td', { class: 'num mono', title: inTitle }, int(u.input_tokens)),
          h('td', { class: 'num mono', title: outTitle }, int(u.output_tokens)),
          h('td', { class: 'num mono' }, usd(u.cost)),
          h('td', null, badge(kind, outcome || '—', { 'data-testid': 'usage-outcome' })),
          h('td', null, h('code', { class: 'small', 'data-testid': 'usage-request-id' }, u.request_id || '')));
      },
    });

    const reloadAll = () => busy(refresh, () => Promise.all([loadCharts(), recent.reload()]));
    refresh.addEventListener('click', reloadAll);
    range.addEventListener('change', loadCharts);
    loadCharts();

    return h('div', null,
      h('div', { class: 'toolbar' }, h('div', { class: 'left' }, range), h('div', { class: 'right' }, refresh)),
      stats,
      charts,
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'Recent requests'), h('p', { class: 'sub' }, 'Newest first.'))),
        recent.el));
  }

  function routeText(route) {
    if (route === null || route === undefined || route === '') return '—';
    if (typeof route !== 'object') return String(route);
    return [route.kind, route.region].filter(Boolean).join(' · ') || JSON.stringify(route);
  }

  // ------------------------------------------------------------------ alerts

  function alertsSection(ctx) {
    const webhook = h('input', { id: 'alerts-webhook', type: 'url', placeholder: 'https://example.com/hooks/tollgate', autocomplete: 'off' });
    const low = h('input', { id: 'alerts-low-balance', type: 'text', inputmode: 'decimal', placeholder: 'e.g. 5.00', autocomplete: 'off' });
    const percents = h('input', { id: 'alerts-percents', type: 'text', placeholder: '80, 100', autocomplete: 'off' });
    const submit = h('button', { id: 'alerts-submit', class: 'btn btn-primary', type: 'submit' }, 'Save alerts');
    const err = errorSlot('alerts-error');
    const status = h('p', { class: 'sub', id: 'alerts-status' }, 'Loading…');
    const secretBox = h('div', { id: 'alerts-secret-box', hidden: true });
    const form = h('form', { id: 'alerts-form', novalidate: true },
      h('div', { class: 'fields' },
        h('div', { class: 'field full' }, h('label', { for: 'alerts-webhook' }, 'Webhook URL'), webhook,
          h('span', { class: 'hint' }, 'Events are POSTed as JSON, signed with HMAC-SHA256.')),
        h('div', { class: 'field' }, h('label', { for: 'alerts-low-balance' }, 'Low-balance threshold (USD)'), low,
          h('span', { class: 'hint' }, 'Optional: alert when the balance falls below this.')),
        h('div', { class: 'field' }, h('label', { for: 'alerts-percents' }, 'Key spend-limit alerts (%)'), percents,
          h('span', { class: 'hint' }, 'Comma-separated percentages of a key’s limit, 1–100.'))),
      err,
      h('div', { class: 'actions form-actions' }, submit),
      secretBox);

    function fill(a) {
      webhook.value = a.webhook_url || '';
      low.value = plainDecimal(a.low_balance_usd);
      percents.value = Array.isArray(a.key_limit_percents) ? a.key_limit_percents.join(', ') : '';
    }

    api('GET', `/workspaces/${enc(ctx.id)}/alerts`).then((a) => {
      fill(a);
      status.textContent = 'Alerts are configured for this workspace.';
    }).catch((e) => {
      if (e.status === 404 && e.code !== 'admin_disabled') {
        status.textContent = 'No alerts configured yet — add a webhook to receive them.';
        percents.value = '80, 100';
      } else {
        status.textContent = '';
        err.show(e.message);
      }
    });

    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      err.hide();
      const url = webhook.value.trim();
      if (!url) { err.show('Enter the webhook URL.'); webhook.focus(); return; }
      const body = { webhook_url: url };
      const lowV = low.value.trim().replace(/^\$/, '');
      if (lowV) {
        if (!isDecimal(lowV)) { err.show('The low-balance threshold must be a decimal amount of USD.'); low.focus(); return; }
        body.low_balance_usd = lowV;
      }
      const pText = percents.value.trim();
      if (pText) {
        const ps = pText.split(/[\s,;]+/).filter(Boolean);
        if (!ps.every((p) => /^\d{1,3}$/.test(p) && Number(p) >= 1 && Number(p) <= 100)) {
          err.show('Key-limit percents must be whole numbers from 1 to 100, separated by commas.');
          percents.focus();
          return;
        }
        body.key_limit_percents = ps.map(Number);
      } else {
        body.key_limit_percents = [];
      }
      try {
        const a = await busy(submit, () => api('PUT', `/workspaces/${enc(ctx.id)}/alerts`, body));
        fill(a);
        status.textContent = 'Alerts are configured for this workspace.';
        toast('Alert settings saved.');
        clear(secretBox);
        const secret = a.signing_secret || a.secret;
        if (secret) {
          const code = h('code', { id: 'alerts-secret' }, secret);
          const copy = h('button', { class: 'btn btn-sm', type: 'button', id: 'alerts-secret-copy' }, icon('copy', 14), 'Copy');
          const copied = h('div', { class: 'copied', role: 'status' });
          copy.addEventListener('click', async () => {
            try {
              await navigator.clipboard.writeText(secret);
              copied.textContent = 'Copied to the clipboard.';
            } catch (_) {
              copied.textContent = 'Select the secret and press Ctrl+C to copy it.';
            }
          });
          add(secretBox,
            h('div', { class: 'warning' }, icon('warn', 18), h('div', null, h('strong', null, 'Signing secret'),
              'Verify each delivery’s HMAC-SHA256 signature with this secret. Store it with the receiver.')),
            h('div', { class: 'secret-box' }, code, copy), copied);
          secretBox.hidden = false;
        }
        deliveries.reload();
      } catch (e) {
        err.show(e.message);
      }
    });

    const deliveries = pagedTable({
      id: 'deliveries-table',
      path: `/workspaces/${enc(ctx.id)}/alerts/deliveries`,
      columns: [{ label: 'Time' }, { label: 'Event' }, { label: 'Attempt', cls: 'num' }, { label: 'HTTP status', cls: 'num' }, { label: 'Result' }, { label: 'Detail' }, { label: 'Event ID' }],
      empty: () => emptyState('No deliveries yet', 'Alert events and each attempt to deliver them appear here.'),
      row: (d) => h('tr', { 'data-testid': 'delivery-row', 'data-id': d.id },
        timeCell(d.at),
        h('td', null, h('code', null, d.event || '')),
        h('td', { class: 'num' }, int(d.attempt)),
        h('td', { class: 'num mono' }, d.status ?? '—'),
        h('td', null, d.delivered ? badge('delivered', 'delivered') : badge('failed', 'failed')),
        h('td', { class: 'small' }, d.result || h('span', { class: 'muted' }, '—')),
        h('td', null, h('code', { class: 'small muted' }, d.event_id || ''))),
    });

    return h('div', null,
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('div', null, h('h2', null, 'Alert settings'), status)),
        h('div', { class: 'card-body' }, form)),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('h2', null, 'Deliveries')),
        deliveries.el));
  }

  // ------------------------------------------------------------------ catalog

  const PRICE_FIELDS = [['input_price', 'Input'], ['output_price', 'Output'], ['cache_read_price', 'Cache read'], ['cache_write_price', 'Cache write']];

  function toggle({ checked, label, testid, onChange }) {
    const input = h('input', { type: 'checkbox', role: 'switch', checked, 'aria-label': label, 'data-testid': testid });
    const text = h('span', { class: 'switch-label' }, checked ? 'active' : 'inactive');
    input.addEventListener('change', async () => {
      const want = input.checked;
      input.disabled = true;
      text.textContent = want ? 'active' : 'inactive';
      try {
        await onChange(want);
      } catch (e) {
        input.checked = !want;
        text.textContent = !want ? 'active' : 'inactive';
      } finally {
        input.disabled = false;
      }
    });
    return h('label', { class: 'switch' }, input, h('span', { class: 'track' }), text);
  }

  function catalogView() {
    const filter = h('input', { id: 'catalog-filter', type: 'search', placeholder: 'Filter models…', 'aria-label': 'Filter models' });
    const tbody = h('tbody');
    const table = h('table', { id: 'catalog-table', class: 'table', 'data-state': 'loading' },
      h('thead', null, h('tr', null,
        h('th', null, 'Model'),
        PRICE_FIELDS.map(([, l]) => h('th', { class: 'num' }, l)),
        h('th', null, 'Active'),
        h('th', { class: 'num' }, ''))),
      tbody);
    const err = errorSlot('catalog-error');
    err.style.margin = '12px 18px';
    const count = h('span', { class: 'muted', id: 'catalog-count' });
    tbody.append(h('tr', { class: 'loading-row' }, h('td', { colspan: 7 }, h('span', { class: 'spinner' }), ' Loading…')));
    const groups = [];

    function applyFilter() {
      const q = filter.value.trim().toLowerCase();
      let shown = 0;
      for (const g of groups) {
        const hit = !q || g.text.includes(q);
        for (const tr of g.rows()) tr.hidden = !hit;
        if (hit) shown++;
      }
      count.textContent = `${shown} of ${groups.length} models`;
    }
    filter.addEventListener('input', applyFilter);

    api('GET', '/catalog').then((out) => {
      clear(tbody);
      const models = (out && out.models) || [];
      if (models.length === 0) {
        tbody.append(h('tr', null, h('td', { colspan: 7 }, h('div', { class: 'empty', id: 'catalog-empty' }, emptyState('The catalog is empty', 'Import one with `tollgate catalog import`.')))));
      }
      for (const model of models) {
        const g = modelGroup(model);
        groups.push(g);
        for (const tr of g.rows()) tbody.append(tr);
      }
      applyFilter();
      table.dataset.state = 'ready';
    }).catch((e) => {
      clear(tbody);
      err.show(e.message);
      table.dataset.state = 'error';
    });

    return h('div', { id: 'page-catalog' },
      pageHead('Catalog', 'Models, their prices (USD per 1M tokens) and upstream routes. Gateways pick up changes at their next catalog refresh.'),
      h('div', { class: 'card' },
        h('div', { class: 'card-head' }, h('div', { class: 'catalog-filter' }, filter), count),
        err,
        h('div', { class: 'table-wrap' }, table)));
  }

  /** A model's aliases: the other ids clients may call it by (none on older gateways). */
  function aliasesOf(model) {
    return Array.isArray(model.aliases) ? model.aliases : [];
  }

  /** A model's rows (the model, its routes, an error slot), re-rendered in place on change. */
  function modelGroup(initial) {
    let model = initial;
    let editing = false;
    let current = [];
    const g = {
      text: `${model.id} ${model.provider || ''} ${model.family || ''} ${model.kind || ''} ${aliasesOf(model).join(' ')}`.toLowerCase(),
      rows: () => current,
    };
    const path = () => `/catalog/models/${enc(model.id)}`;

    function rerender() {
      const old = current;
      current = build();
      if (old.length && old[0].parentNode) {
        const parent = old[0].parentNode;
        for (const tr of current) parent.insertBefore(tr, old[0]);
        for (const tr of old) tr.remove();
      }
    }

    function build() {
      const err = errorSlot(null, true);
      const errRow = h('tr', { class: 'sub-row row-error', hidden: true }, h('td', { colspan: 7 }, err));
      const showErr = (msg) => { err.show(msg); errRow.hidden = false; };
      const inputs = {};
      const priceCells = PRICE_FIELDS.map(([f, l]) => {
        if (editing) {
          inputs[f] = h('input', { class: 'price', type: 'text', inputmode: 'decimal', value: priceText(model[f]), 'aria-label': `${l} price`, 'data-testid': 'price-input', name: f, placeholder: '—' });
          return h('td', { class: 'num' }, inputs[f]);
        }
        const v = model[f];
        return h('td', { class: 'num mono', 'data-testid': `price-${f}` }, v === null || v === undefined ? h('span', { class: 'muted' }, '—') : usd(priceText(v), { minFrac: 2 }));
      });
      const actions = h('div', { class: 'actions' });
      if (editing) {
        const save = h('button', { class: 'btn btn-primary btn-sm', type: 'button', 'data-testid': 'price-save' }, 'Save');
        const cancel = h('button', { class: 'btn btn-sm', type: 'button' }, 'Cancel');
        cancel.addEventListener('click', () => { editing = false; rerender(); });
        save.addEventListener('click', async () => {
          const body = {};
          for (const [f, l] of PRICE_FIELDS) {
            const t = inputs[f].value.trim().replace(/^\$/, '');
            const was = priceText(model[f]);
            if (t === was) continue;
            if (t === '') {
              // The API sets prices; it has no way to remove one (null means "unchanged").
              showErr(`The ${l.toLowerCase()} price cannot be removed here: enter a price.`);
              inputs[f].focus();
              return;
            }
            if (!isDecimal(t)) { showErr(`The ${l.toLowerCase()} price must be a decimal number of USD per 1M tokens.`); inputs[f].focus(); return; }
            body[f] = t;
          }
          if (Object.keys(body).length === 0) { editing = false; rerender(); return; }
          try {
            model = await busy(save, () => api('PATCH', path(), body));
            editing = false;
            rerender();
            toast(`Prices of ${model.id} updated.`);
          } catch (e) {
            showErr(e.message);
          }
        });
        add(actions, cancel, save);
      } else {
        const edit = h('button', { class: 'btn btn-ghost btn-sm', type: 'button', 'data-testid': 'price-edit' }, 'Edit prices');
        edit.addEventListener('click', () => { editing = true; rerender(); const first = current[0].querySelector('input.price'); if (first) first.focus(); });
        actions.append(edit);
      }
      const modelRow = h('tr', { class: 'model-row', 'data-testid': 'model-row', 'data-model-id': model.id },
        h('td', null,
          h('div', { class: 'cell-title mono' }, model.id),
          h('div', { class: 'cell-sub' }, [model.provider, model.family, model.kind].filter(Boolean).join(' · '), model.upstream_model ? ` → ${model.upstream_model}` : '',
            model.shutdown ? h('span', { 'data-testid': 'model-shutdown', title: model.source || '' }, ` · ${model.active ? 'shuts down' : 'shut down'} ${model.shutdown}`) : null),
          aliasesOf(model).length ? h('div', { class: 'cell-sub', 'data-testid': 'model-aliases', title: 'Other ids clients may call this model by' },
            'also ', h('span', { class: 'mono' }, aliasesOf(model).join(', '))) : null),
        priceCells,
        h('td', null, toggle({
          checked: !!model.active, label: `${model.id} active`, testid: 'model-active',
          onChange: async (active) => {
            try {
              model = await api('PATCH', path(), { active });
              toast(`${model.id} ${model.active ? 'activated' : 'deactivated'}.`);
            } catch (e) { showErr(e.message); throw e; }
          },
        })),
        h('td', { class: 'num' }, actions));
      const routes = Array.isArray(model.routes) ? model.routes : [];
      const routeList = h('div', { class: 'form-row', 'data-testid': 'routes' });
      routeList.style.gap = '8px';
      if (routes.length === 0) routeList.append(h('span', { class: 'muted small' }, 'No routes: requests for this model are refused.'));
      routes.forEach((r, n) => {
        routeList.append(h('span', { class: 'chip', 'data-testid': 'route', 'data-route-index': n },
          h('b', null, r.kind || 'route'),
          r.region ? h('span', { class: 'muted' }, r.region) : null,
          r.base_url ? h('code', { class: 'muted small', title: r.base_url }, shortUrl(r.base_url)) : null,
          h('span', { class: 'muted', title: 'priority · weight' }, `p${r.priority ?? 0} · w${r.weight ?? 1}`),
          toggle({
            checked: !!r.active, label: `route ${n} of ${model.id} active`, testid: 'route-active',
            onChange: async (active) => {
              try {
                model = await api('PATCH', `${path()}/routes/${n}`, { active });
                toast(`Route ${r.kind || n} of ${model.id} ${active ? 'activated' : 'deactivated'}.`);
              } catch (e) { showErr(e.message); throw e; }
            },
          })));
      });
      const routesRow = h('tr', { class: 'sub-row', 'data-testid': 'routes-row', 'data-model-id': model.id },
        h('td', { colspan: 7 }, h('div', { class: 'form-row' }, h('span', { class: 'small muted' }, 'Routes'), routeList)));
      return [modelRow, routesRow, errRow];
    }

    current = build();
    return g;
  }

  function shortUrl(u) {
    const t = String(u);
    return t.length > 42 ? t.slice(0, 40) + '…' : t;
  }

  // ------------------------------------------------------------------ audit

  function jsonBlock(v) {
    return v === null || v === undefined ? '—' : JSON.stringify(v, null, 2);
  }

  /** Which top-level fields differ between before and after (`created`, `name, active`). */
  function changeSummary(before, after) {
    if (before == null) return 'created';
    if (after == null) return 'removed';
    if (typeof before !== 'object' || typeof after !== 'object') return 'changed';
    const keys = [...new Set([...Object.keys(before), ...Object.keys(after)])]
      .filter((k) => JSON.stringify(before[k]) !== JSON.stringify(after[k]));
    return keys.length ? keys.join(', ') : 'no field changed';
  }

  function auditView(wsFilter) {
    const wsInput = h('input', { id: 'audit-workspace', type: 'search', placeholder: 'Workspace id (ws_…)', value: wsFilter || '', 'aria-label': 'Filter by workspace' });
    wsInput.style.width = '260px';
    const apply = h('button', { id: 'audit-apply', class: 'btn', type: 'submit' }, 'Filter');
    const form = h('form', { class: 'toolbar', id: 'audit-filter' }, h('div', { class: 'left' }, wsInput, apply),
      wsFilter ? h('a', { href: '#/audit' }, 'Clear filter') : null);
    form.addEventListener('submit', (ev) => {
      ev.preventDefault();
      const v = wsInput.value.trim();
      go(v ? `#/audit/${enc(v)}` : '#/audit');
    });
    const list = pagedTable({
      id: 'audit-table',
      path: '/audit',
      params: { workspace: wsFilter || null },
      columns: [{ label: 'Time' }, { label: 'Actor' }, { label: 'Action' }, { label: 'Target' }, { label: 'Change' }],
      empty: () => emptyState('Nothing in the audit log yet', 'Every change made through the console, the API or the CLI is recorded here.'),
      row: (a) => {
        const hasChange = !(a.before == null && a.after == null);
        const detail = h('tr', { class: 'detail-row', hidden: true, 'data-testid': 'audit-detail' },
          h('td', { colspan: 5 },
            h('div', { class: 'json-pair' },
              h('div', null, h('div', { class: 'json-label' }, 'Before'), h('pre', null, jsonBlock(a.before))),
              h('div', null, h('div', { class: 'json-label' }, 'After'), h('pre', null, jsonBlock(a.after))))));
        const toggleBtn = h('button', { class: 'btn btn-ghost btn-sm change-toggle', type: 'button', 'aria-expanded': 'false', 'data-testid': 'audit-change' },
          h('span', { class: 'caret', 'aria-hidden': 'true' }, '▶'), 'before / after');
        toggleBtn.addEventListener('click', () => {
          detail.hidden = !detail.hidden;
          toggleBtn.setAttribute('aria-expanded', String(!detail.hidden));
        });
        const main = h('tr', { 'data-testid': 'audit-row', 'data-action': a.action, 'data-id': a.id },
          timeCell(a.at),
          h('td', null, a.actor || ''),
          h('td', null, h('span', { class: 'badge badge-action', 'data-testid': 'audit-action' }, a.action || '')),
          h('td', null,
            h('code', { class: 'small', 'data-testid': 'audit-target' }, a.target || ''),
            a.workspace_id && a.workspace_id !== a.target
              ? h('div', { class: 'cell-sub' }, 'in ', h('a', { href: `#/workspaces/${enc(a.workspace_id)}/keys`, class: 'mono' }, a.workspace_id))
              : null),
          h('td', null, hasChange ? [toggleBtn, h('div', { class: 'change-keys' }, changeSummary(a.before, a.after))] : h('span', { class: 'muted' }, '—')));
        return hasChange ? [main, detail] : main;
      },
    });
    return h('div', { id: 'page-audit' },
      pageHead('Audit log', 'Every change to workspaces, keys, credit, alerts and the catalog: who, when, and what it was before and after.'),
      form,
      h('div', { class: 'card' }, list.el));
  }

  // ------------------------------------------------------------------ start

  if (document.readyState === 'loading') document.addEventListener('DOMContentLoaded', boot);
  else boot();
})();
