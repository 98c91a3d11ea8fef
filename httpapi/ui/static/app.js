// pgmirror web console. Plain script, no framework: it calls the JSON API
// with fetch and the token kept in sessionStorage, and builds the page with
// DOM calls. Every value from the API goes into the page as text
// (textContent or attribute values), never as markup.
'use strict';

(() => {
  const TOKEN_KEY = 'pgmirror.token';
  const REFRESH_MS = 3000;
  const VERIFY_PAGE = 5; // verifications shown on a mirror's page
  const LAG_WINDOW_MS = 10 * 60 * 1000; // live samples kept per mirror
  const CHART_WINDOW_MS = 3 * 60 * 60 * 1000; // what a mirror's charts show
  const HISTORY_EVERY_MS = 5 * 60 * 1000; // how often the charts read the history again
  const CHART_GAP_MS = 2 * 60 * 1000; // a longer gap between samples breaks the line
  const LOG_PAGE = 50;
  const SVG_NS = 'http://www.w3.org/2000/svg';

  const view = document.getElementById('view');
  const staleBanner = document.getElementById('stale');
  let me = null; // {username, role} from GET /v1/auth/me
  let routeGen = 0; // bumps on every navigation; stale renders check it
  let timers = [];
  const lagSamples = new Map(); // mirror name -> [{t, lag}]
  const rowSamples = new Map(); // mirror name -> {t, rows, rate}
  const rateSamples = new Map(); // mirror name -> [{t, v}] (rows/s)

  // ---- DOM helpers -------------------------------------------------------

  // el builds an element. attrs: class, text, on<event> handlers, hidden,
  // disabled, checked, value, and any other attribute. Children are nodes or
  // strings (added as text).
  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    append(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === 'text') node.textContent = String(v);
      else if (k.startsWith('on') && typeof v === 'function') node.addEventListener(k.slice(2), v);
      else if (k === 'value') node.value = v;
      else if (k === 'checked') node.checked = !!v;
      else node.setAttribute(k, v === true ? '' : String(v));
    }
  }

  function append(node, children) {
    for (const c of children.flat(Infinity)) {
      if (c === null || c === undefined || c === false) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
  }

  function replace(node, ...children) {
    node.replaceChildren();
    append(node, children);
  }

  const isAdmin = () => !!me && me.role === 'admin';
  const enc = encodeURIComponent;

  function statusBadge(s) {
    return el('span', { class: 'status status-' + String(s || 'unknown').replace(/[^a-z_-]/gi, ''), text: s || 'unknown' });
  }

  // lostBadge marks a mirror whose tables may miss changes (lost_changes).
  function lostBadge(lost) {
    if (!lost) return null;
    return el('span', { class: 'status status-error lost-badge', title: forPeople(lost.action),
      text: `changes lost (${lost.tables.length} ${lost.tables.length === 1 ? 'table' : 'tables'})` });
  }

  // lostBanner says which tables may miss changes and what to do.
  function lostBanner(lost) {
    if (!lost) return [];
    const range = `after ${lost.since_lsn || 'an unknown position'}` + (lost.until_lsn ? ` up to ${lost.until_lsn}` : '');
    return el('div', { class: 'card lost-banner', role: 'alert' },
      el('strong', { text: 'Changes lost: the destination is not proven equal. ' }),
      `The replication slot was ${lost.reason.replace('slot_', '')} (found ${fmtTime(lost.detected_at)}); source changes ${range} may be missing for: `,
      el('code', { text: lost.tables.join(', ') }), '. ',
      el('span', { text: forPeople(lost.action) }));
  }

  // peerBadge marks a mirror whose peers refuse pgmirror's connections
  // (peer_warnings: a changed password, a role made NOLOGIN).
  function peerBadge(warnings) {
    if (!warnings || !warnings.length) return null;
    return el('span', { class: 'status status-error peer-badge', title: warnings.map((w) => `${w.peer}: ${forPeople(w.message)}`).join('\n'),
      text: 'login refused: ' + warnings.map((w) => w.peer).join(', ') });
  }

  // down reports an error that means the API did not answer (the stale
  // banner says so; the page adds no line of its own).
  const down = (e) => e.status === 0 || e.status >= 500;

  // scroller wraps a table so that a wide one scrolls inside its own box
  // instead of widening the page. The box is a named region in the tab
  // order, so that a keyboard can scroll it too.
  const SCROLL_LABELS = { mirrors: 'Mirrors', peers: 'Peers', users: 'Users', tables: 'Tables', 'log-table': 'Logs',
    'cutover-tables': 'Tables at the cut-over', 'cutover-steps': 'Cut-over steps' };
  const scroller = (table, label) => el('div', { class: 'table-scroll', tabindex: '0', role: 'region',
    'aria-label': label || SCROLL_LABELS[table.id] || 'Table' }, table);

  // controlBlocked says why the API refuses pause, resync, schema sync and
  // table resync now ('' when it accepts them): the same rules as the
  // service's (a status being set up or final, a cut-over or a table copy
  // under way).
  function controlBlocked(m) {
    switch (m.status) {
      case 'initializing': return 'it is still initializing; wait until it is running';
      case 'snapshotting': return 'its snapshot is in progress; wait until it is running';
      case 'stopped': return 'it is stopped, which is final; delete it and create it again';
      case 'completed': return 'it was cut over to its destination (status completed, which is final)';
    }
    if (m.cutover && (m.cutover.state === 'requested' || m.cutover.state === 'running')) return 'a cut-over is in progress; wait until it has finished';
    const t = (m.tables || []).find((x) => x.status === 'snapshotting');
    if (t) return `table ${t.table_name} is being copied; wait until it has finished`;
    return '';
  }

  const isFinal = (s) => s === 'completed' || s === 'stopped';

  // Units and times: the same rules as the CLI (cmd/pgmirror/cli_text.go),
  // so that both read the same. Times are local with their offset from UTC
  // ("2026-11-27 19:52:04 UTC+01:00", "… UTC" at offset 0); durations are
  // "0.25 s", "45 s", "3 min 12 s", "3 h 2 min", "2 d 5 h"; sizes are IEC
  // ("1023 B", "1.6 KiB", "5.0 MiB").
  const pad2 = (n) => String(n).padStart(2, '0');

  function zoneName(d) {
    const off = -d.getTimezoneOffset();
    if (off === 0) return 'UTC';
    const a = Math.abs(off);
    return 'UTC' + (off < 0 ? '-' : '+') + pad2(Math.floor(a / 60)) + ':' + pad2(a % 60);
  }

  // fmtClock is a time of day with seconds and zone, for the stale banner.
  const fmtClock = (d) => `${pad2(d.getHours())}:${pad2(d.getMinutes())}:${pad2(d.getSeconds())} ${zoneName(d)}`;

  function fmtTime(iso) {
    if (!iso) return '—';
    const d = new Date(iso);
    if (isNaN(d)) return String(iso);
    return `${d.getFullYear()}-${pad2(d.getMonth() + 1)}-${pad2(d.getDate())} ${fmtClock(d)}`;
  }

  function fmtAgo(iso) {
    if (!iso) return '—';
    const s = Math.round((Date.now() - new Date(iso).getTime()) / 1000);
    if (isNaN(s)) return String(iso);
    if (s < 5) return 'just now';
    if (s < 90) return s + ' s ago';
    if (s < 5400) return Math.round(s / 60) + ' min ago';
    if (s < 172800) return Math.round(s / 3600) + ' h ago';
    return Math.round(s / 86400) + ' days ago';
  }

  // fmtSeconds is a duration for people, rounded first to what is shown
  // (9.996 s is "10 s").
  function fmtSeconds(sec) {
    if (!(sec >= 0)) sec = 0;
    const r = Math.round(sec * 100) / 100;
    if (r < 10) return r.toFixed(2) + ' s';
    const total = Math.round(sec);
    const d = Math.floor(total / 86400), h = Math.floor((total % 86400) / 3600), m = Math.floor((total % 3600) / 60), s = total % 60;
    const two = (a, au, b, bu) => (b === 0 ? `${a} ${au}` : `${a} ${au} ${b} ${bu}`);
    if (total < 60) return s + ' s';
    if (total < 3600) return two(m, 'min', s, 's');
    if (total < 86400) return two(h, 'h', m, 'min');
    return two(d, 'd', h, 'h');
  }

  const fmtLag = (sec) => (sec === null || sec === undefined ? '—' : fmtSeconds(sec));

  // fmtBytes is a size in IEC units, rounded first to what is shown (so
  // that 1048575 bytes are "1.0 MiB", not "1024.0 KiB").
  function fmtBytes(n) {
    if (n === null || n === undefined) return '—';
    if (n < 1024) return n + ' B';
    const units = ['KiB', 'MiB', 'GiB', 'TiB'];
    const r1 = (x) => Math.round(x * 10) / 10;
    let v = n / 1024, i = 0;
    while (r1(v) >= 1024 && i < units.length - 1) { v /= 1024; i++; }
    return r1(v).toFixed(1) + ' ' + units[i];
  }

  // forPeople rewrites the API's pointers to endpoints in a message ("log
  // in again with POST /v1/auth/login", "update it with PUT /v1/peers/x")
  // into what a person does in the console. Pointers to what only the API
  // or the CLI can do stay, said as such.
  const API_WORDS = [
    [/log in again with POST \/v1\/auth\/login/g, 'log in again'],
    [/log in with POST \/v1\/auth\/login and send the header Authorization: Bearer <token>/g, 'log in'],
    [/update it with PUT \/v1\/peers\/[^\s;,)]+/g, 'edit it on the Peers page'],
    [/update the peer \(PUT \/v1\/peers\/[^\s)]+\)/g, 'edit the peer on the Peers page'],
    [/ \(POST \/v1\/peers\/[^\s)]+\/test\)/g, ' (Test connection on the Peers page)'],
    [/create it with POST \/v1\/peers first/g, 'create it on the Peers page first'],
    [/pause it with POST \/v1\/mirrors\/[^\s)]+\/pause/g, 'pause it'],
    [/pause it \(POST \/v1\/mirrors\/[^\s)]+\/pause\)/g, 'pause it'],
    [/resume the mirror \(POST \/v1\/mirrors\/[^\s)]+\/resume\)/g, 'resume the mirror'],
    [/POST \/v1\/mirrors\/[^\s/]+\/verify, then POST \/v1\/mirrors\/[^\s/]+\/verifications\/\{id\}\/repair( if rows differ)?/g,
      'Verify on the mirror\'s page, then Repair$1'],
    [/\(POST \/v1\/mirrors\/[^\s/]+\/resync\/\{[a-z.]+\} for each, or POST \/v1\/mirrors\/[^\s/)]+\/resync for all\)/g,
      '(Resync on each table\'s row, or Resync all tables)'],
    [/resync them with POST \/v1\/mirrors\/[^\s/]+\/resync\/\{table\}/g, 'resync them with Resync on each table\'s row'],
    [/copy each with POST \/v1\/mirrors\/[^\s/]+\/resync\/\{schema\.table\}/g, 'copy each with Resync on its row in Tables'],
    [/ \(POST \/v1\/mirrors\/[^\s/]+\/resync\/[^\s)]+\)/g, ' (Resync on the table\'s row)'],
    [/ \(POST \/v1\/mirrors\/[^\s/)]+\/resync\)/g, ' (Resync all tables)'],
    [/a verification \(POST \/v1\/mirrors\/[^\s/)]+\/verify\)/g, 'a verification (Verify on the mirror\'s page)'],
    [/ \(POST \/v1\/mirrors\/[^\s/)]+\/verify before the cut-over/g, ' (Verify before the cut-over'],
    [/delete the mirror \(DELETE \/v1\/mirrors\/[^\s)]+\)/g, 'delete the mirror'],
    [/: see GET \/v1\/mirrors\/[^\s/]+\/tables/g, ': see the mirror\'s Tables'],
    [/wait for it \(GET \/v1\/mirrors\/[^\s/]+\/verifications\)/g, 'wait for it (Verifications on the mirror\'s page)'],
    [/: see GET \/v1\/mirrors\/[^\s/]+\/verifications/g, ': see Verifications on the mirror\'s page'],
    [/follow it with GET \/v1\/mirrors\/[^\s/]+ \(cutover\)/g, 'follow it on the mirror\'s page (Cut-over)'],
    [/Its steps are in GET \/v1\/mirrors\/[^\s/]+ \(cutover\)/g, 'Its steps are on the mirror\'s page (Cut-over)'],
    [/: see GET \/v1\/mirrors\/[^\s/]+/g, ': see the mirror\'s page'],
    // What the console cannot do yet is named as an API call.
    [/with (PUT|PATCH) (\/v1\/mirrors\/[^\s,)]+)/g, 'through the API: $1 $2'],
    [/\((PUT|PATCH) (\/v1\/mirrors\/[^)]+)\)/g, '(through the API: $1 $2)'],
  ];

  function forPeople(message) {
    let out = String(message || '');
    for (const [re, words] of API_WORDS) out = out.replace(re, words);
    return out;
  }

  const fmtNum = (n) => (n === null || n === undefined ? '—' : Number(n).toLocaleString());
  const fmtRate = (r) => (r === null || r === undefined ? '—' : (r < 10 ? r.toFixed(1) : Math.round(r).toLocaleString()) + ' rows/s');

  // ---- stale data --------------------------------------------------------
  // When the API does not answer (no connection, or a 5xx), what the page
  // shows is the last good read: the page says so in a banner with that
  // read's time, greys its badges and numbers (body.stale) and disables
  // every control, and keeps polling; the first answer clears it all.

  let lastGood = null; // Date of the last good read
  let downSince = null; // Date of the first unanswered call; null when the API answers

  const isStale = () => downSince !== null;

  // markDown records an unanswered call and marks the page stale.
  function markDown(reason) {
    if (!downSince) downSince = new Date();
    document.body.classList.add('stale');
    staleBanner.hidden = false;
    replace(staleBanner,
      el('strong', { text: 'The service does not answer' }),
      ` (since ${fmtClock(downSince)}: ${reason}). `,
      lastGood ? `What this page shows was read at ${fmtClock(lastGood)} and may be out of date. `
        : 'Nothing could be read yet. ',
      'Controls are disabled; the page retries every few seconds.');
    staleBanner.dataset.lastGood = lastGood ? lastGood.toISOString() : '';
    disableControls();
  }

  // disableControls disables every enabled control of the page, marking
  // them so that markUp enables them again.
  function disableControls() {
    for (const c of view.querySelectorAll('button, input, select, textarea')) {
      if (!c.disabled) { c.disabled = true; c.dataset.staleDisabled = '1'; }
    }
    for (const a of view.querySelectorAll('a.button')) a.setAttribute('aria-disabled', 'true');
  }

  // markUp records an answer of the API (good is a successful read) and
  // clears the stale state.
  function markUp(good) {
    if (good) lastGood = new Date();
    if (!downSince) return;
    downSince = null;
    document.body.classList.remove('stale');
    staleBanner.hidden = true;
    staleBanner.replaceChildren();
    for (const c of view.querySelectorAll('[data-stale-disabled]')) {
      c.disabled = false;
      delete c.dataset.staleDisabled;
    }
    for (const a of view.querySelectorAll('a.button')) a.removeAttribute('aria-disabled');
  }

  // ---- API ---------------------------------------------------------------

  class APIError extends Error {
    constructor(status, message) { super(message); this.status = status; }
  }

  // api calls the API and returns the decoded answer (with its headers,
  // as {data, headers}, when withHeaders is set).
  async function api(method, path, body, withHeaders) {
    const headers = { Accept: 'application/json' };
    const token = sessionStorage.getItem(TOKEN_KEY);
    if (token) headers.Authorization = 'Bearer ' + token;
    const opts = { method, headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      opts.body = JSON.stringify(body);
    }
    let resp;
    try {
      resp = await fetch(path, opts);
    } catch (e) {
      markDown('no connection');
      throw new APIError(0, 'The service does not answer (' + e.message + '); the page retries every few seconds');
    }
    let text;
    try {
      text = await resp.text();
    } catch (e) {
      markDown('the answer broke off');
      throw new APIError(0, 'The service\'s answer broke off (' + e.message + '); the page retries every few seconds');
    }
    let data = null;
    if (text) { try { data = JSON.parse(text); } catch (_) { data = null; } }
    if (resp.status >= 500) markDown(`HTTP ${resp.status}`);
    else markUp(resp.ok && method === 'GET');
    if (!resp.ok) {
      const msg = forPeople((data && typeof data.error === 'string') ? data.error : `The service answered HTTP ${resp.status}`);
      // A wrong current password is not a lost session; neither is a 401 to
      // a request sent with a token that a password change has replaced
      // meanwhile (the service may revoke the old one).
      const ownPassword = path === '/v1/auth/change-password' && msg.startsWith('Current password');
      const replaced = token !== sessionStorage.getItem(TOKEN_KEY);
      if (resp.status === 401 && path !== '/v1/auth/login' && !ownPassword && !replaced) {
        logout('Your session ended: ' + msg);
      }
      throw new APIError(resp.status, msg);
    }
    return withHeaders ? { data, headers: resp.headers } : data;
  }

  // rowsTotal is the sum of the tables' rows_synced: rows copied by the
  // snapshot plus every row changed by CDC (a list item has it summed).
  function rowsTotal(m) {
    if (typeof m.rows_synced === 'number') return m.rows_synced;
    return (m.tables || []).reduce((a, t) => a + (t.rows_synced || 0), 0);
  }

  // sample records the mirror's lag and row count at this poll and returns
  // its throughput (rows/s since the previous poll) or null.
  function sample(m) {
    const now = Date.now();
    if (m.lag_seconds !== null && m.lag_seconds !== undefined) {
      const list = lagSamples.get(m.name) || [];
      list.push({ t: now, lag: m.lag_seconds });
      while (list.length && list[0].t < now - LAG_WINDOW_MS) list.shift();
      lagSamples.set(m.name, list);
    }
    const rows = rowsTotal(m);
    const prev = rowSamples.get(m.name);
    let rate = prev ? prev.rate : null;
    if (prev && now - prev.t >= 1000) {
      rate = Math.max(0, rows - prev.rows) / ((now - prev.t) / 1000);
      rowSamples.set(m.name, { t: now, rows, rate });
      const list = rateSamples.get(m.name) || [];
      list.push({ t: now, v: rate });
      while (list.length && list[0].t < now - LAG_WINDOW_MS) list.shift();
      rateSamples.set(m.name, list);
    } else if (!prev) {
      rowSamples.set(m.name, { t: now, rows, rate: null });
    }
    return rate;
  }

  // ---- routing -----------------------------------------------------------

  function clearTimers() {
    timers.forEach((t) => { clearInterval(t); clearTimeout(t); });
    timers = [];
  }

  // every runs fn now and then every ms while the page stays open.
  function every(ms, fn) {
    fn();
    timers.push(setInterval(fn, ms));
  }

  function logout(message) {
    sessionStorage.removeItem(TOKEN_KEY);
    me = null;
    clearTimers();
    routeGen++;
    renderLogin(message);
  }

  function updateHeader(page) {
    const nav = document.getElementById('nav');
    const who = document.getElementById('who');
    const out = document.getElementById('logout');
    nav.hidden = !me;
    out.hidden = !me;
    document.getElementById('account').hidden = !me;
    who.textContent = me ? `${me.username} (${me.role})` : '';
    updateDefaultBanner(page);
    for (const a of nav.querySelectorAll('a')) {
      a.classList.toggle('active', a.dataset.nav === page);
      if (a.hasAttribute('data-admin')) a.hidden = !isAdmin();
    }
  }

  // updateDefaultBanner shows, on every page but the password form itself,
  // that the user's password is still the default "admin" (GET
  // /v1/auth/me's default_password), with a link to the form.
  function updateDefaultBanner(page) {
    const banner = document.getElementById('default-password');
    const show = !!me && me.default_password === true && page !== 'account';
    banner.hidden = !show;
    if (!show) { banner.replaceChildren(); return; }
    if (banner.childElementCount) return;
    replace(banner, el('strong', { text: 'Your password is still the default "admin". ' }),
      'Anyone who can reach this service can guess it and log in as you. ',
      el('a', { href: '#/account', id: 'default-password-link', text: 'Change your password now' }), '.');
  }

  async function route() {
    clearTimers();
    const gen = ++routeGen;
    const live = () => gen === routeGen;
    if (!sessionStorage.getItem(TOKEN_KEY)) {
      renderLogin();
      return;
    }
    if (!me) {
      try {
        me = await api('GET', '/v1/auth/me');
      } catch (e) {
        if (e.status === 401 || !live()) return;
        replace(view, el('p', { class: 'error', text: e.message }));
        // Try again until the service answers.
        timers.push(setTimeout(() => { if (live()) route(); }, REFRESH_MS));
        return;
      }
      if (!live()) return;
    }
    const parts = (location.hash || '#/mirrors').replace(/^#\/?/, '').split('/').map((p) => {
      try { return decodeURIComponent(p); } catch (_) { return p; }
    });
    const page = parts[0] || 'mirrors';
    updateHeader(page === 'new-mirror' ? 'mirrors' : page === 'new-peer' ? 'peers' : page);
    const ctx = { live };
    switch (page) {
      case 'mirrors':
        if (parts[1]) renderMirror(ctx, parts[1]); else renderMirrors(ctx);
        break;
      case 'new-mirror': renderNewMirror(ctx); break;
      case 'peers':
        if (parts[1]) renderEditPeer(ctx, parts[1]); else renderPeers(ctx);
        break;
      case 'account': renderAccount(ctx); break;
      case 'new-peer': renderNewPeer(ctx); break;
      case 'users': renderUsers(ctx); break;
      default: location.hash = '#/mirrors';
    }
  }

  // ---- login -------------------------------------------------------------

  function renderLogin(message) {
    updateHeader('');
    const err = el('p', { class: 'form-error', id: 'login-error', role: 'alert', text: message || '' });
    const user = el('input', { name: 'username', id: 'login-username', autocomplete: 'username', required: true, autofocus: true });
    const pass = el('input', { name: 'password', id: 'login-password', type: 'password', autocomplete: 'current-password', required: true });
    const form = el('form', {
      onsubmit: async (ev) => {
        ev.preventDefault();
        err.textContent = '';
        try {
          const res = await api('POST', '/v1/auth/login', { username: user.value, password: pass.value });
          sessionStorage.setItem(TOKEN_KEY, res.token);
          // route() reads GET /v1/auth/me (role, default_password).
          me = null;
          // A changed hash routes by itself (hashchange).
          if (!location.hash || location.hash === '#/login') location.hash = '#/mirrors'; else route();
        } catch (e) {
          err.textContent = e.message;
        }
      },
    },
    el('label', { for: 'login-username', text: 'User name' }), user,
    el('label', { for: 'login-password', text: 'Password' }), pass,
    el('button', { class: 'primary', type: 'submit', id: 'login-submit', text: 'Log in' }),
    err);
    replace(view, el('div', { class: 'card login' }, el('h1', { text: 'Log in to pgmirror' }), form));
    user.focus();
  }

  // ---- mirrors list ------------------------------------------------------
  // One request per refresh whatever the fleet's size: the list endpoint
  // filters, sorts and pages, and its headers give the matching count
  // (X-Total-Count) and the fleet's totals by status (X-Status-Totals).

  const LIST_PAGE = 50;
  const STATUSES = ['initializing', 'snapshotting', 'running', 'paused', 'error', 'stopped', 'completed'];
  // The list's filter, order and page, kept while the session lasts.
  const listState = { status: '', q: '', sort: 'name', offset: 0 };

  // parseTotals reads X-Status-Totals ("running=3, paused=1, ...").
  function parseTotals(header) {
    const out = {};
    for (const part of String(header || '').split(',')) {
      const [k, v] = part.trim().split('=');
      if (k && v !== undefined) out[k] = Number(v);
    }
    return out;
  }

  function renderMirrors(ctx) {
    const body = el('tbody');
    const stamp = el('span', { class: 'muted', id: 'refreshed' });
    const err = el('p', { class: 'error', role: 'alert' });
    const totalsBar = el('div', { class: 'totals', id: 'mirror-totals', role: 'group', 'aria-label': 'Mirrors by status' });
    const statusSelect = el('select', { id: 'mirror-status-filter', name: 'status' },
      el('option', { value: '', text: 'All statuses' }), STATUSES.map((st) => el('option', { value: st, text: st })));
    statusSelect.value = listState.status;
    const search = el('input', { type: 'search', id: 'mirror-search', name: 'q', value: listState.q, placeholder: 'Name or peer',
      autocomplete: 'off' });
    // The order, also for narrow screens where the column headers are hidden.
    const sortSelect = el('select', { id: 'mirror-sort', name: 'sort' }, [
      ['name', 'Name, A to Z'], ['-name', 'Name, Z to A'], ['status', 'Status'], ['-status', 'Status, reversed'],
      ['-lag', 'Lag, highest first'], ['lag', 'Lag, lowest first'], ['-created', 'Newest first'], ['created', 'Oldest first'],
    ].map(([v, label]) => el('option', { value: v, text: label })));
    sortSelect.value = listState.sort;
    sortSelect.addEventListener('change', () => { listState.sort = sortSelect.value; listState.offset = 0; load(); });
    const pageInfo = el('span', { class: 'muted', id: 'mirror-page-info', role: 'status' });
    const prev = el('button', { type: 'button', id: 'mirror-prev', text: '← Previous', disabled: true,
      onclick: () => { listState.offset = Math.max(0, listState.offset - LIST_PAGE); load(); } });
    const next = el('button', { type: 'button', id: 'mirror-next', text: 'Next →', disabled: true,
      onclick: () => { listState.offset += LIST_PAGE; load(); } });

    // Sortable column headers: a button each; aria-sort tells the order.
    const sortable = (label, key, cls) => {
      const th = el('th', { class: cls || null, 'data-sort': key },
        el('button', { type: 'button', class: 'sort', id: 'sort-' + key, text: label, onclick: () => {
          listState.sort = listState.sort === key ? '-' + key : key;
          listState.offset = 0;
          load();
        } }));
      return th;
    };
    const heads = [sortable('Name', 'name'), sortable('Status', 'status'), sortable('Lag', 'lag', 'num'),
      el('th', { class: 'num', text: 'Throughput' }), el('th', { class: 'num', text: 'Rows' }),
      el('th', { class: 'num', text: 'Errors' }), el('th', { text: 'Source → destination' }),
      sortable('Created', 'created'), el('th', { text: 'Updated' })];
    const showSort = () => {
      sortSelect.value = listState.sort;
      for (const th of heads) {
        const key = th.dataset.sort;
        if (!key) continue;
        const on = listState.sort.replace(/^-/, '') === key;
        const desc = listState.sort.startsWith('-');
        if (on) th.setAttribute('aria-sort', desc ? 'descending' : 'ascending'); else th.removeAttribute('aria-sort');
        th.firstChild.textContent = th.firstChild.textContent.replace(/ [▲▼]$/, '') + (on ? (desc ? ' ▼' : ' ▲') : '');
      }
    };

    let searchTimer = null;
    search.addEventListener('input', () => {
      clearTimeout(searchTimer);
      searchTimer = setTimeout(() => {
        if (!ctx.live()) return;
        listState.q = search.value.trim();
        listState.offset = 0;
        load();
      }, 300);
    });
    statusSelect.addEventListener('change', () => { listState.status = statusSelect.value; listState.offset = 0; load(); });

    replace(view,
      el('div', { class: 'toolbar' }, el('h1', { text: 'Mirrors' }),
        isAdmin() ? el('a', { href: '#/new-mirror', id: 'new-mirror', class: 'button', text: 'Create mirror' }) : null),
      totalsBar,
      el('form', { class: 'toolbar', id: 'mirror-filter', role: 'search', onsubmit: (ev) => {
        ev.preventDefault();
        clearTimeout(searchTimer);
        listState.q = search.value.trim();
        listState.offset = 0;
        load();
      } },
      el('label', { for: 'mirror-status-filter', text: 'Status' }), statusSelect,
      el('label', { for: 'mirror-search', text: 'Search' }), search,
      el('label', { for: 'mirror-sort', text: 'Sort' }), sortSelect),
      err,
      scroller(el('table', { id: 'mirrors', class: 'stack' }, el('thead', {}, el('tr', {}, heads)), body)),
      el('div', { class: 'pager' }, prev, pageInfo, next),
      el('p', {}, stamp, ' · refreshes every few seconds'));
    showSort();

    // The fleet's totals by status, a button each (made once, so that the
    // focus stays on one across refreshes); a click filters by that status,
    // a second click shows all statuses again.
    const chips = ['', ...STATUSES].map((st) => {
      const count = el('span', { class: 'total-count', text: '' });
      const chip = el('button', { type: 'button', class: 'total' + (st ? ' total-' + st : ''), 'data-status': st, hidden: true,
        onclick: () => {
          listState.status = listState.status === st ? '' : st;
          statusSelect.value = listState.status;
          listState.offset = 0;
          load();
        } }, el('span', { class: 'total-label', text: st || 'All' }), ' ', count);
      chip.count = count;
      return chip;
    });
    append(totalsBar, chips);
    const showTotals = (totals) => {
      const all = STATUSES.reduce((a, st) => a + (totals[st] || 0), 0);
      for (const chip of chips) {
        const st = chip.dataset.status;
        const n = st ? (totals[st] || 0) : all;
        chip.count.textContent = fmtNum(n);
        chip.setAttribute('aria-pressed', listState.status === st ? 'true' : 'false');
        chip.hidden = !!st && !n && listState.status !== st;
      }
    };

    let seq = 0; // only the answer to the latest request is shown
    const load = async () => {
      const mine = ++seq;
      const q = new URLSearchParams({ sort: listState.sort, limit: LIST_PAGE, offset: listState.offset });
      if (listState.status) q.set('status', listState.status);
      if (listState.q) q.set('q', listState.q);
      showSort();
      try {
        const res = await api('GET', '/v1/mirrors?' + q, undefined, true);
        if (!ctx.live() || mine !== seq) return;
        const list = res.data || [];
        const total = Number(res.headers.get('X-Total-Count') || list.length);
        if (!list.length && total > 0 && listState.offset > 0) {
          // The page emptied (mirrors deleted or filtered away): go to the last one.
          listState.offset = Math.max(0, Math.floor((total - 1) / LIST_PAGE) * LIST_PAGE);
          load();
          return;
        }
        err.textContent = '';
        showTotals(parseTotals(res.headers.get('X-Status-Totals')));
        // data-label names each cell's column when a narrow screen stacks
        // the rows (app.css).
        const rows = list.map((m) => {
          const rate = sample(m);
          return el('tr', { 'data-mirror': m.name },
            el('td', { class: 'name', 'data-label': 'Name' }, el('a', { href: '#/mirrors/' + enc(m.name), text: m.name })),
            el('td', { 'data-label': 'Status' }, statusBadge(m.status), lostBadge(m.lost_changes), peerBadge(m.peer_warnings),
              m.error_message ? el('div', { class: 'row-error error', text: forPeople(m.error_message) }) : null),
            el('td', { class: 'num', 'data-label': 'Lag', text: fmtLag(m.lag_seconds) }),
            el('td', { class: 'num', 'data-label': 'Throughput', text: fmtRate(rate) }),
            el('td', { class: 'num', 'data-label': 'Rows', text: fmtNum(rowsTotal(m)) }),
            el('td', { class: 'num', 'data-label': 'Errors', text: m.error_count }),
            el('td', { class: 'name', 'data-label': 'Peers', text: `${m.source_peer} → ${m.destination_peer}` }),
            el('td', { 'data-label': 'Created', title: fmtTime(m.created_at), text: fmtAgo(m.created_at) }),
            el('td', { 'data-label': 'Updated', title: fmtTime(m.updated_at), text: fmtAgo(m.updated_at) }));
        });
        const filtered = listState.status || listState.q;
        if (!rows.length) {
          rows.push(el('tr', {}, el('td', { colspan: heads.length, class: 'muted',
            text: filtered ? 'No mirror matches the filter.' : 'No mirrors yet.' })));
        }
        replace(body, rows);
        pageInfo.textContent = total ? `${listState.offset + 1}–${listState.offset + list.length} of ${fmtNum(total)}` : '0 mirrors';
        prev.disabled = listState.offset === 0 || isStale();
        next.disabled = listState.offset + list.length >= total || isStale();
        stamp.textContent = 'Refreshed ' + fmtClock(new Date());
      } catch (e) {
        if (ctx.live() && mine === seq) err.textContent = down(e) ? '' : e.message;
      }
    };

    every(REFRESH_MS, load);
  }

  // ---- mirror detail -----------------------------------------------------

  function renderMirror(ctx, name) {
    const path = '/v1/mirrors/' + enc(name);
    const title = el('h1', {}, name);
    const notice = el('p', { id: 'control-result', role: 'status' });
    const errBox = el('p', { class: 'error', id: 'mirror-error', role: 'alert' });
    const peerBox = el('div', { id: 'peer-warnings', role: 'status' });
    const lostBox = el('div', { id: 'lost-changes' });
    const reverseBox = el('div', { id: 'reverse-problems' });
    const controls = el('div', { class: 'controls', id: 'controls' });
    const blockedLine = el('p', { class: 'muted', id: 'control-blocked' });
    const summary = el('div', { id: 'summary' });
    const logsBox = el('section', { class: 'card', id: 'logs' });
    let current = null;

    // The charts open with the service's history of the last hours
    // (GET .../history, read again every few minutes) and go on with the
    // samples this page polls.
    let hist = null; // {lag: [{t, v}], rate: [{t, v}]}; null until read
    let histAt = 0;
    const loadHistory = async () => {
      try {
        const h = await api('GET', path + '/history?since=3h');
        if (!ctx.live()) return;
        const at = (x) => new Date(x.at).getTime();
        hist = {
          lag: h.samples.filter((x) => x.lag_seconds !== null).map((x) => ({ t: at(x), v: x.lag_seconds })),
          rate: h.samples.map((x) => ({ t: at(x), v: x.rows_per_second })),
        };
        histAt = Date.now();
      } catch (_) {
        // The charts show the polled samples only; tried again at the next refresh.
      }
    };
    const series = (kind) => {
      const h = hist ? hist[kind] : [];
      const live = kind === 'lag' ? (lagSamples.get(name) || []).map((x) => ({ t: x.t, v: x.lag })) : (rateSamples.get(name) || []);
      const after = h.length ? h[h.length - 1].t : 0;
      return h.concat(live.filter((x) => x.t > after));
    };

    const refresh = async () => {
      try {
        if (!hist || Date.now() - histAt > HISTORY_EVERY_MS) await loadHistory();
        const m = await api('GET', path);
        if (!ctx.live()) return;
        current = m;
        const rate = sample(m);
        replace(title, el('span', { class: 'name', text: m.name }), ' ', statusBadge(m.status));
        title.dataset.status = m.status;
        errBox.textContent = m.error_message ? 'Error: ' + forPeople(m.error_message) : '';
        const warnings = m.peer_warnings || [];
        replace(peerBox, warnings.length ? el('div', { class: 'card warn-banner' }, warnings.map((w) => el('p', { class: 'warning', 'data-peer': w.peer },
          `Warning: ${w.role} peer ${w.peer} refuses connections since ${fmtTime(w.since)}: ${forPeople(w.message)}. ` +
          'Replication already running goes on; its next connection will fail. Fix the login, or edit the peer on the Peers page.'))) : null);
        replace(lostBox, lostBanner(m.lost_changes));
        updateControls(m);
        replace(summary, mirrorSummary(m, rate));
      } catch (e) {
        if (!ctx.live()) return;
        if (e.status === 404) errBox.textContent = `Mirror ${name} does not exist (any more).`;
        else if (!down(e)) errBox.textContent = e.message;
      }
    };

    // control sends one control request and shows its answer.
    let busy = false; // a control request is under way

    const control = async (label, method, p) => {
      busy = true;
      updateControls(current);
      notice.className = '';
      notice.textContent = label + '…';
      try {
        const res = await api(method, p);
        if (!ctx.live()) return;
        notice.className = 'notice';
        notice.textContent = (res && res.message) || (label + ': done');
        if (method === 'DELETE') {
          location.hash = '#/mirrors';
          return;
        }
      } catch (e) {
        if (!ctx.live()) return;
        notice.className = 'error';
        notice.textContent = label + ' failed: ' + e.message;
      } finally {
        busy = false;
      }
      await refresh();
      loadLogs();
    };

    // The buttons are made once; each refresh only enables or disables
    // them, so that a click never lands on a button being replaced.
    const buttons = [];
    // refusal(m, blocked) is why the API would refuse the button's request
    // now ('' when it would accept it).
    const button = (id, label, refusal, onclick, cls) => {
      const b = el('button', { type: 'button', id, class: cls || '', text: label, onclick });
      b.refusal = refusal;
      buttons.push(b);
    };
    let opener = null; // the button whose confirmation is open
    const showButtons = () => {
      delete controls.dataset.confirming;
      replace(controls, buttons);
      updateControls(current);
      // Focus goes back to the button that asked, when it is still there.
      if (opener && opener.isConnected && !opener.disabled) opener.focus();
      opener = null;
    };

    // confirmThen shows an inline confirmation before a destructive action,
    // with the focus on its Cancel.
    const confirmThen = (question, label, action) => {
      const from = document.activeElement;
      controls.dataset.confirming = '1';
      const no = el('button', { type: 'button', id: 'confirm-no', text: 'Cancel', onclick: showButtons });
      replace(controls,
        el('span', { class: 'error', id: 'confirm-question', text: question }),
        el('button', { type: 'button', class: 'danger', id: 'confirm-yes', text: label, onclick: () => { showButtons(); action(); } }),
        no);
      opener = from instanceof HTMLButtonElement ? from : null;
      controls.scrollIntoView({ block: 'nearest' });
      no.focus();
    };

    // updateControls offers what the API would accept now: a button it
    // would refuse is disabled with the reason as its title, and in a final
    // status only Delete is left.
    const updateControls = (m) => {
      if (!isAdmin()) { controls.hidden = true; return; }
      const blocked = m ? controlBlocked(m) : '';
      for (const b of buttons) {
        const why = m ? b.refusal(m, blocked) : 'the mirror was not read yet';
        b.disabled = busy || isStale() || why !== '';
        b.title = why ? 'Not now: ' + why : '';
        b.hidden = !!m && isFinal(m.status) && b.id !== 'delete';
      }
      blockedLine.textContent = blocked ? `Pause, resync and schema sync are not offered: ${blocked}.` : '';
    };

    if (isAdmin()) {
      button('pause', 'Pause', (m, blocked) => (m.status === 'paused' ? 'it is already paused' : blocked), () => control('Pause', 'POST', path + '/pause'));
      button('resume', 'Resume', (m) => (m.status === 'paused' ? '' : 'only a paused mirror can be resumed'), () => control('Resume', 'POST', path + '/resume'));
      button('retry', 'Retry now', (m) => (m.status === 'error' ? '' : 'retry is only for a mirror in error'), () => control('Retry', 'POST', path + '/retry'));
      button('sync-schema', 'Sync schema', (m, blocked) => blocked, () => control('Sync schema', 'POST', path + '/sync-schema'));
      button('resync', 'Resync all tables', (m, blocked) => blocked, () => confirmThen(
        `Resync ${name}? Every destination table is truncated and copied again.`, 'Yes, resync',
        () => control('Resync', 'POST', path + '/resync')), 'danger');
      button('delete', 'Delete', () => '', () => confirmThen(
        `Delete ${name}? Its replication slot and publication are dropped; destination data stays. This cannot be undone.`,
        'Yes, delete', () => control('Delete', 'DELETE', path)), 'danger');
      showButtons();
    }

    const resyncTable = (table) => confirmThen(
      `Resync table ${table}? It is truncated on the destination and copied again.`, 'Yes, resync table',
      () => control('Table resync', 'POST', path + '/resync/' + enc(table)));

    function mirrorSummary(m, rate) {
      const cfg = el('dl', { class: 'config' },
        dt('Source peer', m.source_peer), dt('Destination peer', m.destination_peer),
        dt('Desired state', m.desired_state),
        dt('Initial snapshot', m.do_initial_snapshot ? 'yes' : 'no'),
        dt('Existing destination rows', m.existing_destination_rows),
        dt('Schema changes', m.schema_changes),
        dt('Rows per partition', fmtNum(m.snapshot_num_rows_per_partition)),
        dt('Parallel workers', m.snapshot_max_parallel_workers),
        dt('Tables in parallel', m.snapshot_num_tables_in_parallel),
        dt('CDC sync interval', m.cdc_sync_interval_seconds + ' s'),
        dt('CDC batch size', fmtNum(m.cdc_batch_size)),
        dt('Publication', m.publication_name), dt('Replication slot', m.replication_slot_name),
        dt('Created', fmtTime(m.created_at)));
      const tot = (k) => (m.tables || []).reduce((a, t) => a + (t[k] || 0), 0);
      const counters = el('dl', { class: 'config', id: 'counters' },
        dt('Lag', fmtLag(m.lag_seconds)), dt('Throughput', fmtRate(rate)),
        dt('Rows synced', fmtNum(tot('rows_synced'))), dt('Inserted', fmtNum(tot('rows_inserted'))),
        dt('Updated', fmtNum(tot('rows_updated'))), dt('Deleted', fmtNum(tot('rows_deleted'))),
        dt('Truncates', fmtNum(tot('truncates'))),
        dt('Last LSN', m.last_lsn || '—'), dt('Last batch', m.last_sync_batch_id),
        dt('Error count', m.error_count), dt('Next retry', fmtTime(m.next_retry_at)),
        dt('Slot WAL kept', fmtBytes(m.slot_lag_bytes)), dt('Slot WAL status', m.slot_wal_status || '—'),
        dt('Sequences synced', fmtTime(m.sequences_synced_at)), dt('Updated', fmtTime(m.updated_at)));
      const out = [
        m.cutover ? el('section', { class: 'card', id: 'cutover' }, el('h2', { text: 'Cut-over' }), cutoverView(m)) : null,
        el('div', { class: 'cols' },
          el('section', { class: 'card' }, el('h2', { text: 'Configuration' }), cfg),
          el('section', { class: 'card' }, el('h2', { text: 'Counters' }), counters)),
        el('section', { class: 'card' }, el('h2', { text: 'Lag, last 3 hours' }),
          seriesChart(series('lag'), { id: 'lag-chart', what: 'replication lag', fmt: fmtLag, zero: '0 s', none: 'No lag reading yet' })),
        el('section', { class: 'card' }, el('h2', { text: 'Throughput, last 3 hours' }),
          seriesChart(series('rate'), { id: 'rate-chart', what: 'rows per second', fmt: fmtRate, zero: '0', none: 'No throughput reading yet' })),
        el('section', { class: 'card' }, el('h2', { text: 'Tables' }), scroller(tablesTable(m))),
      ];
      return out;
    }

    // tableState is a table's state as the page shows it: after a completed
    // cut-over a table that was replicating is final too (completed).
    const tableState = (m, t) => (m.status === 'completed' && t.status === 'running' ? 'completed' : t.status);

    function tablesTable(m) {
      const blocked = controlBlocked(m);
      const rows = (m.tables || []).map((t) => {
        const p = t.progress;
        const progress = (p === null || p === undefined)
          ? el('span', { class: 'muted', text: '—' })
          : el('span', {}, el('progress', { max: 1, value: p, 'aria-label': 'snapshot progress of ' + t.table_name }),
            ' ', el('span', { class: 'pct', text: Math.floor(p * 100) + '%' }));
        const why = t.status === 'dropped' ? 'it was dropped on the source' : blocked;
        return el('tr', { 'data-table': t.table_name, 'data-status': tableState(m, t) },
          el('td', { class: 'name', text: t.table_name }), el('td', {}, statusBadge(tableState(m, t))), el('td', { class: 'progress' }, progress),
          el('td', { class: 'num', text: fmtNum(t.rows_synced) }),
          el('td', { class: 'num', text: fmtNum(t.rows_estimated) }),
          el('td', { class: 'num', text: fmtNum(t.rows_inserted) }),
          el('td', { class: 'num', text: fmtNum(t.rows_updated) }),
          el('td', { class: 'num', text: fmtNum(t.rows_deleted) }),
          el('td', { class: 'num', text: fmtNum(t.truncates) }),
          el('td', { title: fmtTime(t.last_synced_at), text: fmtAgo(t.last_synced_at) }),
          isAdmin() && !isFinal(m.status) ? el('td', {}, el('button', { type: 'button', class: 'resync-table', text: 'Resync',
            disabled: busy || isStale() || why !== '', title: why ? 'Not now: ' + why : null, onclick: () => resyncTable(t.table_name) })) : null);
      });
      return el('table', { id: 'tables' },
        el('thead', {}, el('tr', {},
          ['Table', 'Status', 'Snapshot progress'].map((h) => el('th', { text: h })),
          ['Rows synced', 'Estimated', 'Inserted', 'Updated', 'Deleted', 'Truncates'].map((h) => el('th', { class: 'num', text: h })),
          el('th', { text: 'Last synced' }), isAdmin() && !isFinal(m.status) ? el('th', {}, el('span', { class: 'sr-only', text: 'Actions' })) : null)),
        el('tbody', {}, rows));
    }

    // cutoverView is the mirror's last cut-over: its state, the reverse
    // mirror, what it did not check or carry (warnings), each table's final
    // state and how it was compared, and the steps.
    function cutoverView(m) {
      const c = m.cutover;
      const steps = (c.steps || []).map((s) => el('tr', {},
        el('td', { text: s.name }), el('td', {}, statusBadge(s.state)),
        el('td', { class: 'num', text: s.duration_ms + ' ms' }),
        el('td', {}, s.error ? el('span', { class: 'error', text: forPeople(s.error) }) : null,
          s.detail ? el('pre', { class: 'details', text: JSON.stringify(s.detail) }) : null)));
      const warnings = c.warnings || [];
      const countsOnly = new Set(c.row_counts_only || []);
      const checksums = (c.steps || []).some((s) => s.name === 'verify_checksums' && s.state === 'done');
      const compared = (t) => (c.state !== 'completed' ? '—' : countsOnly.has(t.table_name) ? 'row counts only'
        : checksums ? 'row counts and checksums' : 'row counts');
      const tables = (m.tables || []).map((t) => el('tr', { 'data-table': t.table_name, 'data-status': tableState(m, t) },
        el('td', { class: 'name', text: t.table_name }), el('td', {}, statusBadge(tableState(m, t))),
        el('td', { class: 'num', text: fmtNum(t.rows_synced) }), el('td', { class: 'compared', text: compared(t) })));
      const o = c.options || {};
      return [
        el('dl', { class: 'config' }, dt('State', c.state), dt('Requested', fmtTime(c.requested_at) + (c.requested_by ? ' by ' + c.requested_by : '')),
          dt('Finished', fmtTime(c.finished_at)), dt('Target LSN', c.target_lsn || '—'),
          dt('Source made read-only', o.lock_source ? 'yes' : 'no'), dt('Replication slot dropped', o.drop_slot ? 'yes' : 'no')),
        c.error ? el('p', { class: 'error', text: forPeople(c.error) }) : null,
        c.reverse_mirror ? el('p', { class: 'reverse-mirror', id: 'reverse-mirror' }, 'Reverse mirror ',
          el('a', { href: '#/mirrors/' + enc(c.reverse_mirror), id: 'reverse-mirror-link', class: 'name', text: c.reverse_mirror }),
          ': replicates the writes made on the destination back to the source from the cut-over position, so the switch can be rolled back without losing them.') : null,
        warnings.length ? el('div', { class: 'cutover-warnings', id: 'cutover-warnings', role: 'note' },
          el('h3', { text: `Not checked or not carried to the destination (${warnings.length})` }),
          el('p', { class: 'muted', text: 'Create what the application needs on the destination yourself.' }),
          el('ul', {}, warnings.map((w) => el('li', { text: w }))))
          : (c.state === 'completed' ? el('p', { class: 'notice', id: 'cutover-warnings-none', text: 'Every check ran and nothing around the tables was left behind.' }) : null),
        el('h3', { text: 'Tables' }),
        scroller(el('table', { id: 'cutover-tables' }, el('thead', {}, el('tr', {}, el('th', { text: 'Table' }), el('th', { text: 'Final state' }),
          el('th', { class: 'num', text: 'Rows synced' }), el('th', { text: 'Compared at the cut-over' }))), el('tbody', {}, tables))),
        el('h3', { text: 'Steps' }),
        scroller(el('table', { id: 'cutover-steps' }, el('thead', {}, el('tr', {}, ['Step', 'State', 'Duration', 'Detail'].map((h) => el('th', { text: h })))),
          el('tbody', {}, steps))),
      ];
    }

    // ---- logs: search, level, paging (newest first) ----
    let logOffset = 0;
    let logSeq = 0; // only the answer to the latest request is shown
    const search = el('input', { type: 'search', id: 'log-search', placeholder: 'Search messages and details', 'aria-label': 'Search the logs' });
    const level = el('select', { id: 'log-level', 'aria-label': 'Log level' },
      ['', 'ERROR', 'WARN', 'INFO', 'DEBUG'].map((l) => el('option', { value: l, text: l || 'All levels' })));
    const logBody = el('tbody');
    const logInfo = el('span', { id: 'log-info', class: 'muted' });
    const logErr = el('p', { class: 'error' });
    const newer = el('button', { type: 'button', id: 'log-newer', text: '← Newer', onclick: () => { logOffset = Math.max(0, logOffset - LOG_PAGE); loadLogs(); } });
    const older = el('button', { type: 'button', id: 'log-older', text: 'Older →', onclick: () => { logOffset += LOG_PAGE; loadLogs(); } });

    const loadLogs = async () => {
      const seq = ++logSeq;
      const q = new URLSearchParams({ limit: LOG_PAGE, offset: logOffset });
      if (search.value.trim()) q.set('search', search.value.trim());
      if (level.value) q.set('level', level.value);
      try {
        const res = await api('GET', path + '/logs?' + q);
        if (!ctx.live() || seq !== logSeq) return;
        logErr.textContent = '';
        replace(logBody, res.logs.map((l) => el('tr', { class: 'log' },
          el('td', { class: 'time', text: fmtTime(l.created_at) }),
          el('td', { class: 'level-' + l.level, text: l.level }),
          el('td', { class: 'log-message' }, el('span', { class: 'message', text: l.message }),
            l.details && Object.keys(l.details).length ? el('pre', { class: 'details', text: JSON.stringify(l.details) }) : null))));
        if (!res.logs.length) replace(logBody, el('tr', {}, el('td', { colspan: 3, class: 'muted', text: 'No log entries match.' })));
        logInfo.textContent = res.total ? `${res.offset + 1}–${res.offset + res.logs.length} of ${res.total}` : '0 entries';
        newer.disabled = logOffset === 0;
        older.disabled = logOffset + res.logs.length >= res.total;
      } catch (e) {
        if (ctx.live()) logErr.textContent = down(e) ? '' : e.message;
      }
    };

    replace(logsBox,
      el('h2', { text: 'Logs' }),
      el('form', { class: 'toolbar', id: 'log-form', onsubmit: (ev) => { ev.preventDefault(); logOffset = 0; loadLogs(); } },
        search, level, el('button', { type: 'submit', id: 'log-apply', text: 'Search' }),
        el('button', { type: 'button', id: 'log-refresh', text: 'Refresh', onclick: loadLogs })),
      logErr,
      scroller(el('table', { id: 'log-table' }, el('thead', {}, el('tr', {}, ['Time', 'Level', 'Message'].map((h) => el('th', { text: h })))), logBody)),
      el('div', { class: 'pager' }, newer, logInfo, older));
    level.addEventListener('change', () => { logOffset = 0; loadLogs(); });


    // ---- verifications: the latest results; Verify and Repair for admins ----
    const verifyBox = el('section', { class: 'card', id: 'verifications' });
    const verifyList = el('div', { id: 'verification-list' });
    const verifyResult = el('p', { id: 'verify-result', role: 'status' });
    const verifyErr = el('p', { class: 'error' });
    let verifyBusy = false; // a verify or repair request is under way
    let verifyRunning = false; // the newest verification is running
    let lastVerifications = ''; // the list is only redrawn when it changed
    let repaired = new Set(); // ids of the shown verifications that a shown repair repaired
    const verifyButton = isAdmin() ? el('button', { type: 'button', id: 'verify', text: 'Verify', onclick: () => startVerify('Verify', path + '/verify', {}) }) : null;
    const updateVerifyButton = () => {
      if (verifyButton) verifyButton.disabled = verifyBusy || verifyRunning || isStale() || !current || current.status !== 'running';
    };

    const startVerify = async (label, p, body) => {
      verifyBusy = true;
      updateVerifyButton();
      verifyResult.className = '';
      verifyResult.textContent = label + '…';
      try {
        const v = await api('POST', p, body);
        if (!ctx.live()) return;
        verifyResult.className = 'notice';
        verifyResult.textContent = `${label}: verification ${v.id} started`;
      } catch (e) {
        if (!ctx.live()) return;
        verifyResult.className = 'error';
        verifyResult.textContent = label + ' failed: ' + e.message;
      } finally {
        verifyBusy = false;
      }
      await loadVerifications();
    };

    function verificationView(v) {
      const differing = v.rows_differing;
      const found = v.state === 'done' && differing > 0;
      const outcome = v.state === 'done' ? (found ? (differing === 1 ? '1 row differs' : fmtNum(differing) + ' rows differ') : 'no differences') : '';
      const examples = [];
      for (const t of v.tables || []) {
        for (const [kind, keys] of [['missing', t.missing], ['extra', t.extra], ['different', t.different]]) {
          for (const k of keys || []) examples.push(el('li', {}, el('span', { class: 'muted', text: `${t.table} ${kind}: ` }), el('code', { text: k })));
        }
      }
      const tables = (v.tables || []).map((t) => el('tr', { 'data-table': t.table },
        el('td', { text: t.table }), el('td', { text: t.method || '—' }),
        el('td', { class: 'num rows-source', text: fmtNum(t.rows_source) }),
        el('td', { class: 'num rows-destination', text: fmtNum(t.rows_destination) }),
        el('td', { class: 'num chunks-differing', text: `${fmtNum(t.chunks_differing)} of ${fmtNum(t.chunks)}` }),
        el('td', { class: 'num', text: fmtNum(t.rows_differing) }),
        el('td', { class: 'muted', text: t.skipped || '' })));
      return el('div', { class: 'verification', 'data-id': v.id, 'data-state': v.state },
        el('h3', {}, `Verification ${v.id} `, statusBadge(v.state), ' ', el('span', { class: found ? 'error outcome' : 'outcome', text: outcome }),
          isAdmin() && found && !repaired.has(v.id) ? el('button', { type: 'button', class: 'repair', text: 'Repair',
            onclick: () => startVerify('Repair', `${path}/verifications/${enc(v.id)}/repair`) }) : null),
        el('dl', { class: 'config' }, dt('LSN', v.lsn), dt('Requested', fmtTime(v.started_at) + (v.requested_by ? ' by ' + v.requested_by : '')),
          dt('Finished', fmtTime(v.finished_at)), v.repair_of ? dt('Repair of', 'verification ' + v.repair_of) : null),
        v.error ? el('p', { class: 'error', text: forPeople(v.error) }) : null,
        tables.length ? scroller(el('table', {}, el('thead', {}, el('tr', {}, el('th', { text: 'Table' }), el('th', { text: 'Method' }),
          ['Rows source', 'Rows destination', 'Chunks differing', 'Rows differing'].map((h) => el('th', { class: 'num', text: h })),
          el('th', { text: 'Skipped' }))), el('tbody', {}, tables)), `Tables of verification ${v.id}`) : null,
        examples.length ? el('ul', { class: 'examples' }, examples) : null,
        (v.reverse_mirror_problems || []).length ? el('div', { class: 'reverse-problems' },
          el('p', { class: 'warning', text: 'A cut-over could not create a reverse mirror (reverse_mirror_name):' }),
          el('ul', {}, v.reverse_mirror_problems.map((p) => el('li', { text: p })))) : null);
    }

    const loadVerifications = async () => {
      try {
        const list = await api('GET', path + '/verifications?limit=' + VERIFY_PAGE);
        if (!ctx.live()) return;
        verifyErr.textContent = '';
        verifyRunning = list.length > 0 && list[0].state === 'running';
        updateVerifyButton();
        const key = JSON.stringify(list);
        if (key === lastVerifications) return;
        lastVerifications = key;
        repaired = new Set(list.map((v) => v.repair_of).filter((id) => id));
        if (!list.length) replace(verifyList, el('p', { class: 'muted', text: 'Not verified yet.' }));
        else replace(verifyList, list.map(verificationView));
        if (isStale()) disableControls();
        // The newest check of a reverse mirror also shows at the top of the page.
        const checked = list.find((v) => v.reverse_mirror_problems);
        const problems = checked ? checked.reverse_mirror_problems : [];
        replace(reverseBox, problems.length && current && !isFinal(current.status) ? el('div', { class: 'card warn-banner', role: 'status' },
          el('p', { class: 'warning', text: `A cut-over with a reverse mirror would fail (verification ${checked.id}): ` }),
          el('ul', {}, problems.map((p) => el('li', { text: p })))) : null);
      } catch (e) {
        if (ctx.live()) verifyErr.textContent = down(e) ? '' : e.message;
      }
    };

    replace(verifyBox, el('h2', { text: 'Verifications' }),
      verifyButton ? el('div', { class: 'controls' }, verifyButton, verifyResult) : null,
      verifyErr, verifyList);

    replace(view, el('p', {}, el('a', { href: '#/mirrors', text: '← Mirrors' })), title, errBox, peerBox, lostBox, reverseBox, controls, blockedLine, notice, summary, verifyBox, logsBox);
    if (!isAdmin()) controls.hidden = true;
    // The first page of logs follows the newest entries; older pages stay put.
    every(REFRESH_MS, () => { refresh().then(updateVerifyButton); loadVerifications(); if (logOffset === 0) loadLogs(); });
  }

  function dt(label, value) {
    return [el('dt', { text: label }), el('dd', { text: value === null || value === undefined || value === '' ? '—' : value })];
  }

  // seriesChart draws samples ([{t, v}], oldest first; v null for
  // unknown) of the last CHART_WINDOW_MS as lines in an inline SVG, broken
  // where samples are missing (a paused mirror, a gap in the history).
  function seriesChart(samples, o) {
    const W = 1100, H = 170, L = 76, B = 22, T = 10, R = 10;
    const now = Date.now();
    const shown = samples.filter((s) => s.t >= now - CHART_WINDOW_MS);
    const known = shown.filter((s) => s.v !== null && s.v !== undefined);
    const max = Math.max(1, ...known.map((s) => s.v)) * 1.1;
    const x = (t) => L + (W - L - R) * (1 - (now - t) / CHART_WINDOW_MS);
    const y = (v) => T + (H - T - B) * (1 - v / max);
    const parts = [
      svg('line', { class: 'grid', x1: L, y1: y(0), x2: W - R, y2: y(0) }),
      svg('line', { class: 'grid', x1: L, y1: y(max / 2), x2: W - R, y2: y(max / 2) }),
      svg('text', { x: 2, y: y(max / 2) + 4, text: o.fmt(max / 2) }),
      svg('text', { x: 2, y: y(0) + 4, text: o.zero }),
      svg('text', { x: L, y: H - 4, text: '3 h ago' }),
      svg('text', { x: x(now - 2 * 3600e3) - 14, y: H - 4, text: '2 h' }),
      svg('text', { x: x(now - 3600e3) - 14, y: H - 4, text: '1 h' }),
      svg('text', { x: W - R - 24, y: H - 4, text: 'now' }),
    ];
    // Lines: consecutive known samples at most CHART_GAP_MS apart.
    let line = [];
    let prevT = null;
    const flush = () => {
      if (line.length > 1) parts.push(svg('polyline', { class: 'line', points: line.join(' ') }));
      else if (line.length === 1) parts.push(svg('circle', { class: 'point', cx: line[0].split(',')[0], cy: line[0].split(',')[1], r: 2 }));
      line = [];
    };
    for (const s of shown) {
      if (s.v === null || s.v === undefined || (prevT !== null && s.t - prevT > CHART_GAP_MS)) flush();
      if (s.v !== null && s.v !== undefined) line.push(`${x(s.t).toFixed(1)},${y(s.v).toFixed(1)}`);
      prevT = s.t;
    }
    flush();
    if (known.length) {
      const last = known[known.length - 1];
      parts.push(svg('circle', { class: 'dot', cx: x(last.t).toFixed(1), cy: y(last.v).toFixed(1), r: 4 }));
    } else {
      parts.push(svg('text', { x: L + 10, y: H / 2, text: o.none }));
    }
    const first = known.length ? known[0].t : null;
    return svg('svg', { class: 'chart', id: o.id, viewBox: `0 0 ${W} ${H}`, role: 'img',
      'aria-label': `${o.what} over the last 3 hours` + (first ? `, from ${fmtTime(new Date(first).toISOString())}` : ''),
      'data-samples': known.length, 'data-first': first || '' }, parts);
  }

  // ---- forms -------------------------------------------------------------

  // formField returns a labelled input with an error line under it.
  function formField(label, input) {
    const id = 'f-' + input.name;
    input.id = id;
    return [el('label', { for: id, text: label }), input, el('div', { class: 'field-error', 'data-for': input.name })];
  }

  // fieldLabels maps the API's names of a form's fields (ssl_mode,
  // existing_destination_rows) to the labels the form shows them under.
  function fieldLabels(form) {
    const out = new Map();
    for (const l of form.querySelectorAll('label[for]')) {
      const input = document.getElementById(l.htmlFor);
      if (input && input.name && form.contains(input)) out.set(input.name, l.textContent);
    }
    for (const e of form.querySelectorAll('[data-name][data-label]')) out.set(e.dataset.name, e.dataset.label);
    return out;
  }

  // withLabels writes the form's labels, in quotes, in place of the API's
  // field names that a text names (those with an underscore: a field called
  // "name" or "host" is also a plain word).
  function withLabels(text, labels) {
    let out = text;
    for (const [name, label] of labels) {
      if (name.includes('_')) out = out.replace(new RegExp('\\b' + name + '\\b', 'g'), `"${label}"`);
    }
    return out;
  }

  // showFormError puts the API's message on the form, with the form's
  // labels for the fields it names, and, for each "field: problem" part of
  // a validation message, the problem next to that field. A field the
  // message names elsewhere (a 409 naming existing_destination_rows) is
  // marked too.
  function showFormError(form, message) {
    for (const e of form.querySelectorAll('.field-error')) e.textContent = '';
    for (const i of form.querySelectorAll('.invalid')) i.classList.remove('invalid');
    const labels = fieldLabels(form);
    const prefix = (/^(Invalid request|Malformed JSON body): /.exec(message) || [''])[0];
    const body = message.slice(prefix.length);
    const mark = (name) => {
      const input = form.querySelector(`[name="${name}"]`);
      if (input) input.classList.add('invalid');
    };
    const parts = body.split('; ').map((part) => {
      const m = /^([a-z_]+)((?:[.[][^:]*)?): (.*)$/.exec(part);
      if (!m || !labels.has(m[1])) return withLabels(part, labels);
      mark(m[1]);
      const line = form.querySelector(`.field-error[data-for="${m[1]}"]`);
      if (line) line.textContent = withLabels(m[3], labels);
      return `${labels.get(m[1])}${m[2]}: ${withLabels(m[3], labels)}`;
    });
    for (const name of labels.keys()) {
      if (name.includes('_') && new RegExp('\\b' + name + '\\b').test(body)) mark(name);
    }
    form.querySelector('.form-error').textContent = message ? prefix + parts.join('; ') : '';
  }

  function renderNewPeer(ctx) {
    if (!isAdmin()) { replace(view, el('p', { class: 'error', text: 'Only an admin can create peers.' })); return; }
    const input = (name, attrs) => el('input', Object.assign({ name }, attrs || {}));
    const ssl = el('select', { name: 'ssl_mode' }, ['prefer', 'disable', 'require', 'verify-ca', 'verify-full'].map((v) => el('option', { value: v, text: v })));
    const form = el('form', { class: 'grid', id: 'peer-form' },
      formField('Name', input('name', { required: true })),
      formField('Host', input('host', { required: true })),
      formField('Port', input('port', { type: 'number', value: '5432', min: 1, max: 65535 })),
      formField('User', input('user', { required: true })),
      formField('Password', input('password', { type: 'password', autocomplete: 'new-password' })),
      formField('Database', input('database', { required: true })),
      formField('SSL mode', ssl),
      el('p', { class: 'form-error actions', role: 'alert' }),
      el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'primary', id: 'peer-submit', text: 'Create peer' }), ' ',
        el('a', { href: '#/peers', text: 'Cancel' })));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const v = (n) => form.elements[n].value;
      try {
        await api('POST', '/v1/peers', { name: v('name'), host: v('host'), port: Number(v('port')), user: v('user'),
          password: v('password'), database: v('database'), ssl_mode: v('ssl_mode') });
        location.hash = '#/peers';
      } catch (e) {
        if (ctx.live()) showFormError(form, e.message);
      }
    });
    replace(view, el('h1', { text: 'Create peer' }), el('div', { class: 'card' }, form));
    heartbeat();
  }

  // heartbeat keeps a page without data of its own (a form) polling, so
  // that it too shows when the service stops answering and when it is back.
  function heartbeat() {
    timers.push(setInterval(() => { api('GET', '/v1/auth/me').catch(() => {}); }, REFRESH_MS));
  }

  async function renderNewMirror(ctx) {
    if (!isAdmin()) { replace(view, el('p', { class: 'error', text: 'Only an admin can create mirrors.' })); return; }
    let peers = [];
    try {
      peers = await api('GET', '/v1/peers');
    } catch (e) {
      if (!ctx.live()) return;
      replace(view, el('h1', { text: 'Create mirror' }), el('p', { class: 'error', text: e.message }));
      // The form needs the peers: try again until they can be read.
      timers.push(setTimeout(() => { if (ctx.live()) renderNewMirror(ctx); }, REFRESH_MS));
      return;
    }
    if (!ctx.live()) return;
    const peerSelect = (name) => el('select', { name }, el('option', { value: '', text: '— choose a peer —' }),
      peers.map((p) => el('option', { value: p.name, text: `${p.name} (${p.host}:${p.port}/${p.database})` })));
    const src = peerSelect('source_peer');
    const dst = peerSelect('destination_peer');
    const tables = el('div', { id: 'source-tables', class: 'muted', text: 'Choose the source peer to list its tables.' });
    tables.setAttribute('data-name', 'table_mappings');
    tables.setAttribute('data-label', 'Tables');
    const num = (name, def) => el('input', { name, type: 'number', min: 1, placeholder: String(def) });
    const form = el('form', { class: 'grid', id: 'mirror-form' },
      formField('Name', el('input', { name: 'name', required: true })),
      formField('Source peer', src),
      formField('Destination peer', dst),
      el('label', { text: 'Tables' }), tables, el('div', { class: 'field-error', 'data-for': 'table_mappings' }),
      formField('Initial snapshot', el('input', { name: 'do_initial_snapshot', type: 'checkbox', checked: true })),
      formField('Rows already in destination tables', el('select', { name: 'existing_destination_rows' },
        el('option', { value: 'refuse', text: 'refuse (the mirror is not created)' }),
        el('option', { value: 'truncate', text: 'truncate (replace them)' }),
        el('option', { value: 'keep', text: 'keep (copy over them by primary key)' }))),
      formField('Source schema changes', el('select', { name: 'schema_changes' },
        el('option', { value: 'apply', text: 'apply (rename, drop, add, retype on the destination too)' }),
        el('option', { value: 'warn', text: 'warn (leave the destination as it is)' }),
        el('option', { value: 'stop', text: 'stop (pause the mirror before the change)' }))),
      formField('CDC sync interval (s)', num('cdc_sync_interval_seconds', 60)),
      formField('CDC batch size', num('cdc_batch_size', 10000)),
      formField('Rows per snapshot partition', num('snapshot_num_rows_per_partition', 500000)),
      formField('Snapshot workers', num('snapshot_max_parallel_workers', 4)),
      formField('Tables in parallel', num('snapshot_num_tables_in_parallel', 4)),
      el('p', { class: 'form-error actions', role: 'alert' }),
      el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'primary', id: 'mirror-submit', text: 'Create mirror' }), ' ',
        el('a', { href: '#/mirrors', text: 'Cancel' })));
    src.addEventListener('change', async () => {
      if (!src.value) { replace(tables, 'Choose the source peer to list its tables.'); return; }
      replace(tables, 'Loading tables…');
      try {
        const list = await api('GET', '/v1/peers/' + enc(src.value) + '/tables');
        tables.className = '';
        replace(tables, list.length ? list.map((t) => el('label', { class: 'table-choice' },
          el('input', { type: 'checkbox', name: 'table', value: JSON.stringify([t.schema, t.table_name]) }),
          ` ${t.schema}.${t.table_name}`, el('br'))) : 'The source peer has no tables.');
      } catch (e) {
        tables.className = 'error';
        replace(tables, e.message);
      }
    });
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const f = form.elements;
      const body = { name: f.name.value, source_peer: f.source_peer.value, destination_peer: f.destination_peer.value,
        do_initial_snapshot: f.do_initial_snapshot.checked, existing_destination_rows: f.existing_destination_rows.value,
        schema_changes: f.schema_changes.value, table_mappings: [] };
      for (const c of form.querySelectorAll('input[name="table"]:checked')) {
        const [schema, table] = JSON.parse(c.value);
        body.table_mappings.push({ source_schema: schema, source_table: table, destination_schema: schema, destination_table: table });
      }
      for (const n of ['cdc_sync_interval_seconds', 'cdc_batch_size', 'snapshot_num_rows_per_partition', 'snapshot_max_parallel_workers', 'snapshot_num_tables_in_parallel']) {
        if (f[n].value !== '') body[n] = Number(f[n].value);
      }
      try {
        const res = await api('POST', '/v1/mirrors', body);
        location.hash = '#/mirrors/' + enc(res.name);
      } catch (e) {
        if (ctx.live()) showFormError(form, e.message);
      }
    });
    replace(view, el('h1', { text: 'Create mirror' }), el('div', { class: 'card' }, form));
    heartbeat();
  }

  // ---- peers -------------------------------------------------------------

  function renderPeers(ctx) {
    const body = el('tbody');
    const err = el('p', { class: 'error', role: 'alert' });
    const notice = el('p', { id: 'peer-result', role: 'status' });
    replace(view,
      el('div', { class: 'toolbar' }, el('h1', { text: 'Peers' }),
        isAdmin() ? el('a', { href: '#/new-peer', id: 'new-peer', class: 'button', text: 'Create peer' }) : null),
      err, notice,
      scroller(el('table', { id: 'peers', class: 'stack' }, el('thead', {}, el('tr', {},
        ['Name', 'Host', 'Port', 'Database', 'User', 'SSL mode', 'Updated'].map((h) => el('th', { text: h })),
        isAdmin() ? [el('th', { text: 'Connection' }), el('th', { text: 'Actions' })] : null)), body)));
    // peerActions is a peer's Edit link and Delete button; Delete asks
    // first, with the focus on Cancel, and gives the focus back.
    const peerActions = (p) => {
      const cell = el('td', { 'data-label': 'Actions', class: 'peer-actions' });
      const edit = el('a', { href: '#/peers/' + enc(p.name), class: 'button edit-peer', text: 'Edit', 'aria-label': 'Edit peer ' + p.name });
      const del = el('button', { type: 'button', class: 'danger delete-peer', text: 'Delete', 'aria-label': 'Delete peer ' + p.name });
      const buttons = () => { confirming = null; replace(cell, edit, ' ', del); };
      del.addEventListener('click', () => {
        confirming = p.name;
        const no = el('button', { type: 'button', class: 'confirm-no', text: 'Cancel', onclick: () => { buttons(); del.focus(); } });
        const yes = el('button', { type: 'button', class: 'danger confirm-yes', text: 'Yes, delete', onclick: async () => {
          yes.disabled = true;
          try {
            await api('DELETE', '/v1/peers/' + enc(p.name));
            if (!ctx.live()) return;
            confirming = null;
            notice.className = 'notice';
            notice.textContent = `Peer ${p.name} deleted.`;
            shown = null;
            load();
          } catch (e) {
            if (!ctx.live()) return;
            buttons();
            del.focus();
            notice.className = 'error';
            notice.textContent = e.status === 409 ? `Peer ${p.name} is not deleted: ${e.message.replace(/^Peer "[^"]*" is /, 'it is ')}.` : 'Delete failed: ' + e.message;
          }
        } });
        replace(cell, el('span', { class: 'confirm-question', text: `Delete peer ${p.name}? ` }), yes, ' ', no);
        no.focus();
      });
      buttons();
      return cell;
    };
    // The list refreshes like every page; its rows are only rebuilt when a
    // peer changed (and not while a deletion is being confirmed), so that a
    // connection test's answer stays.
    let shown = null;
    let confirming = null;
    const load = async () => {
      try {
        const peers = await api('GET', '/v1/peers');
        if (!ctx.live()) return;
        err.textContent = '';
        const key = JSON.stringify(peers);
        if (key === shown || (confirming && peers.some((p) => p.name === confirming))) return;
        shown = key;
        replace(body, peers.length ? peers.map((p) => {
          const result = el('span', { class: 'test-result' });
          const test = async () => {
            result.className = 'test-result muted';
            result.textContent = 'testing…';
            try {
              const r = await api('POST', '/v1/peers/' + enc(p.name) + '/test');
              result.className = 'test-result ' + (r.success ? 'notice' : 'error');
              result.textContent = r.success ? 'OK: ' + r.version : 'Failed: ' + (r.error || 'no detail');
            } catch (e) {
              result.className = 'test-result error';
              result.textContent = e.message;
            }
          };
          const labels = ['Name', 'Host', 'Port', 'Database', 'User', 'SSL mode'];
          return el('tr', { 'data-peer': p.name },
            [p.name, p.host, p.port, p.database, p.user, p.ssl_mode].map((v, i) => el('td', { class: i === 0 || i === 1 || i === 3 || i === 4 ? 'name' : null, 'data-label': labels[i], text: v })),
            el('td', { 'data-label': 'Updated', title: fmtTime(p.updated_at), text: fmtAgo(p.updated_at) }),
            isAdmin() ? [el('td', { 'data-label': 'Connection' }, el('button', { type: 'button', class: 'test-peer', text: 'Test connection', 'aria-label': 'Test connection to ' + p.name, onclick: test }), ' ', result),
              peerActions(p)] : null);
        }) : el('tr', {}, el('td', { colspan: isAdmin() ? 9 : 7, class: 'muted', text: 'No peers yet.' })));
      } catch (e) {
        if (ctx.live()) err.textContent = down(e) ? '' : e.message;
      }
    };
    every(REFRESH_MS, load);
  }

  // renderEditPeer is an admin's form for a peer's connection settings.
  // The password is never shown: left empty it stays as it is, filled in
  // it replaces the stored one (a password rotation).
  async function renderEditPeer(ctx, name) {
    if (!isAdmin()) { replace(view, el('p', { class: 'error', text: 'Only an admin can edit peers.' })); return; }
    let p;
    try {
      p = await api('GET', '/v1/peers/' + enc(name));
    } catch (e) {
      if (!ctx.live()) return;
      replace(view, el('h1', { text: 'Edit peer' }), el('p', { class: 'error', text: e.status === 404 ? `Peer ${name} does not exist (any more).` : e.message }),
        el('p', {}, el('a', { href: '#/peers', text: '← Peers' })));
      if (down(e)) timers.push(setTimeout(() => { if (ctx.live()) renderEditPeer(ctx, name); }, REFRESH_MS));
      return;
    }
    if (!ctx.live()) return;
    const input = (n, attrs) => el('input', Object.assign({ name: n }, attrs || {}));
    const ssl = el('select', { name: 'ssl_mode' }, ['prefer', 'disable', 'require', 'verify-ca', 'verify-full'].map((v) => el('option', { value: v, text: v })));
    ssl.value = p.ssl_mode;
    const form = el('form', { class: 'grid', id: 'peer-edit-form' },
      formField('Host', input('host', { required: true, value: p.host })),
      formField('Port', input('port', { type: 'number', value: String(p.port), min: 1, max: 65535, required: true })),
      formField('User', input('user', { required: true, value: p.user, autocomplete: 'off' })),
      formField('New password', input('password', { type: 'password', autocomplete: 'new-password', 'aria-describedby': 'peer-password-hint' })),
      el('p', { class: 'muted hint', id: 'peer-password-hint', text: 'Leave empty to keep the stored password; it is never shown.' }),
      formField('Database', input('database', { required: true, value: p.database })),
      formField('SSL mode', ssl),
      el('p', { class: 'form-error actions', role: 'alert' }),
      el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'primary', id: 'peer-save', text: 'Save peer' }), ' ',
        el('a', { href: '#/peers', text: 'Cancel' })));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const v = (n) => form.elements[n].value;
      const body = { host: v('host'), port: Number(v('port')), user: v('user'), database: v('database'), ssl_mode: v('ssl_mode') };
      if (v('password') !== '') body.password = v('password');
      try {
        await api('PUT', '/v1/peers/' + enc(name), body);
        if (!ctx.live()) return;
        location.hash = '#/peers';
      } catch (e) {
        if (ctx.live()) showFormError(form, e.message);
      }
    });
    replace(view, el('p', {}, el('a', { href: '#/peers', text: '← Peers' })),
      el('h1', {}, 'Edit peer ', el('span', { class: 'name', text: p.name })),
      el('p', { class: 'muted', text: 'Mirrors that use this peer connect with the new settings from their next connection on.' }),
      el('div', { class: 'card' }, form));
    heartbeat();
  }

  // renderAccount is the logged-in user's own password change.
  function renderAccount(ctx) {
    const input = (n, label, autocomplete) => formField(label, el('input', { name: n, type: 'password', autocomplete, required: true }));
    const result = el('p', { id: 'password-result', role: 'status' });
    const form = el('form', { class: 'grid', id: 'password-form' },
      input('current_password', 'Current password', 'current-password'),
      input('new_password', 'New password', 'new-password'),
      input('repeat_password', 'New password again', 'new-password'),
      el('p', { class: 'form-error actions', role: 'alert' }),
      el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'primary', id: 'password-submit', text: 'Change password' })));
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const f = form.elements;
      result.textContent = '';
      if (f.new_password.value !== f.repeat_password.value) {
        showFormError(form, 'repeat_password: does not match the new password; type the same new password twice');
        f.repeat_password.focus();
        return;
      }
      try {
        const res = await api('POST', '/v1/auth/change-password', { current_password: f.current_password.value, new_password: f.new_password.value });
        // The answer carries a token that is valid under the new password
        // (the old one may be revoked by the change).
        if (res.token) sessionStorage.setItem(TOKEN_KEY, res.token);
        if (!ctx.live()) return;
        form.reset();
        showFormError(form, '');
        result.className = 'notice';
        result.textContent = res.message;
        me = await api('GET', '/v1/auth/me');
        updateDefaultBanner('account');
        const note = document.getElementById('password-default-note');
        if (note && !me.default_password) note.remove();
      } catch (e) {
        if (!ctx.live()) return;
        showFormError(form, e.message);
        if (e.status === 401) f.current_password.focus();
      }
    });
    replace(view, el('h1', { text: 'Change your password' }),
      el('p', { class: 'muted' }, 'Logged in as ', el('span', { class: 'name', text: me.username }), '. The new password applies to your next login.'),
      me.default_password ? el('p', { class: 'warning', id: 'password-default-note', text: 'Your password is still the default "admin": choose another one.' }) : null,
      el('div', { class: 'card' }, form), result);
    heartbeat();
  }

  // ---- users (admin) -----------------------------------------------------

  function renderUsers(ctx) {
    if (!isAdmin()) { replace(view, el('p', { class: 'error', text: 'Only an admin can manage users.' })); return; }
    const body = el('tbody');
    const err = el('p', { class: 'error', role: 'alert' });
    const role = el('select', { name: 'role' }, el('option', { value: 'viewer', text: 'viewer' }), el('option', { value: 'admin', text: 'admin' }));
    const form = el('form', { class: 'grid', id: 'user-form' },
      formField('User name', el('input', { name: 'username', required: true, autocomplete: 'off' })),
      formField('Password', el('input', { name: 'password', type: 'password', autocomplete: 'new-password', required: true })),
      formField('Role', role),
      el('p', { class: 'form-error actions', role: 'alert' }),
      el('div', { class: 'actions' }, el('button', { type: 'submit', class: 'primary', id: 'user-submit', text: 'Add user' })));
    let shown = null; // the rows are only rebuilt when a user changed
    const load = async () => {
      try {
        const users = await api('GET', '/v1/users');
        if (!ctx.live()) return;
        err.textContent = '';
        const key = JSON.stringify(users);
        if (key === shown) return;
        shown = key;
        replace(body, users.map((u) => {
          const cell = el('td');
          if (u.username !== me.username) {
            // The confirmation takes the focus (on Cancel) and gives it back.
            const del = el('button', { type: 'button', class: 'danger', text: 'Delete', onclick: () => {
              const no = el('button', { type: 'button', text: 'Cancel', onclick: () => { replace(cell, del); del.focus(); } });
              replace(cell, `Delete ${u.username}? `,
                el('button', { type: 'button', class: 'danger', text: 'Yes, delete', onclick: async () => {
                  try { await api('DELETE', '/v1/users/' + enc(u.username)); shown = null; load(); } catch (e) { err.textContent = e.message; }
                } }), ' ', no);
              no.focus();
            } });
            cell.append(del);
          }
          return el('tr', { 'data-user': u.username }, el('td', { class: 'name', text: u.username }), el('td', { text: u.role }),
            el('td', { text: fmtTime(u.created_at) }), cell);
        }));
      } catch (e) {
        if (ctx.live()) err.textContent = down(e) ? '' : e.message;
      }
    };
    form.addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const f = form.elements;
      try {
        await api('POST', '/v1/users', { username: f.username.value, password: f.password.value, role: f.role.value });
        form.reset();
        showFormError(form, '');
        shown = null;
        load();
      } catch (e) {
        if (ctx.live()) showFormError(form, e.message);
      }
    });
    replace(view, el('h1', { text: 'Users' }), err,
      scroller(el('table', { id: 'users' }, el('thead', {}, el('tr', {}, ['User name', 'Role', 'Created'].map((h) => el('th', { text: h })),
        el('th', {}, el('span', { class: 'sr-only', text: 'Actions' })))), body)),
      el('h2', { text: 'Add a user' }), el('div', { class: 'card' }, form));
    every(REFRESH_MS, load);
  }

  // ---- start -------------------------------------------------------------

  // The skip link moves the focus to the page's content (its href would
  // change the route).
  document.getElementById('skip').addEventListener('click', (ev) => { ev.preventDefault(); view.focus(); });
  document.getElementById('logout').addEventListener('click', () => { location.hash = '#/mirrors'; logout(); });
  window.addEventListener('hashchange', route);
  route();
})();
