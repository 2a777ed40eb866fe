// The console: sign in with a wallet, then keys, agents, servers (and their paid time), SSH keys,
// payments, events and webhooks, one section per `#hash`. Plain DOM: every value from the API goes in as text.

import { call, decodeHeader, encodeHeader, get, ProblemError } from './api.js';
import * as wallet from './wallet.js';

const $ = (id) => document.getElementById(id);

/** An element: `tag`, attributes (`on…` are listeners), children (strings become text). */
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith('on')) el.addEventListener(name.slice(2), value);
    else if (value === true) el.setAttribute(name, '');
    else el.setAttribute(name, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

const when = (at) => (at ? new Date(at).toLocaleString() : '—');
const usdc = (atomic) => `${(Number(atomic) / 1e6).toFixed(6).replace(/\.?0+$/, '')} USDC`;
const short = (value) =>
  value && value.length > 14 ? `${value.slice(0, 8)}…${value.slice(-4)}` : value || '—';

/** Shows an error: the problem's title and detail. */
function showError(error) {
  const alert = $('alert');
  alert.replaceChildren(
    h('strong', {}, error instanceof ProblemError ? error.title : 'Error'),
    ' ',
    error instanceof ProblemError && error.problem.field ? `${error.problem.field}: ` : '',
    error instanceof ProblemError ? error.detail : error.message || String(error),
    ' ',
    h(
      'button',
      {
        type: 'button',
        class: 'link',
        onclick: () => {
          alert.hidden = true;
        },
      },
      'Dismiss',
    ),
  );
  alert.hidden = false;
}

function clearError() {
  $('alert').hidden = true;
}

/** Runs a long action: the button shows progress and is disabled until it ends. */
async function busy(button, label, action) {
  const text = button.textContent;
  button.disabled = true;
  button.textContent = label;
  $('progress').textContent = label;
  clearError();
  try {
    return await action((step) => {
      $('progress').textContent = step;
    });
  } catch (error) {
    showError(error);
    return undefined;
  } finally {
    button.disabled = false;
    button.textContent = text;
    $('progress').textContent = '';
  }
}

/** Asks to confirm: resolves to true when the human presses `ok`. */
function confirmAction(title, body, ok) {
  const dialog = $('confirm');
  $('confirm-title').textContent = title;
  $('confirm-body').replaceChildren(...[body].flat());
  $('confirm-ok').textContent = ok;
  dialog.returnValue = '';
  return new Promise((resolve) => {
    dialog.addEventListener('close', () => resolve(dialog.returnValue === 'ok'), { once: true });
    dialog.showModal();
  });
}

/**
 * A paged list, in a table that scrolls sideways on a narrow screen (a focusable region named
 * `label`, so that keyboard users can scroll it): `path` answers
 * `{items, nextCursor}`; `render(items)` makes table rows. A "Load more" button follows
 * `nextCursor`, sent as `cursorName` (`cursor`; the event feed's is `after`). A feed always
 * answers a cursor to resume from: `untilEmpty` hides the button once a page is empty.
 */
async function paged(
  container,
  label,
  path,
  headers,
  render,
  cursorName = 'cursor',
  untilEmpty = false,
) {
  const body = h('tbody', {});
  const more = h('button', { type: 'button', hidden: true }, 'Load more');
  let cursor = null;
  const load = async () => {
    const sep = path.includes('?') ? '&' : '?';
    const page = await get(
      cursor ? `${path}${sep}${cursorName}=${encodeURIComponent(cursor)}` : path,
    );
    body.querySelector('tr.empty')?.remove();
    body.append(...render(page.items));
    if (!body.children.length) {
      body.append(h('tr', { class: 'empty' }, h('td', { colspan: headers.length }, 'None yet.')));
    }
    cursor = page.nextCursor;
    more.hidden = !cursor || (untilEmpty && !page.items.length);
  };
  more.addEventListener('click', () => busy(more, 'Loading…', load));
  container.append(
    h(
      'div',
      // A region that scrolls sideways takes the keyboard focus (arrow keys scroll it).
      { class: 'scroll', tabindex: '0', role: 'region', 'aria-label': label },
      h(
        'table',
        {},
        h(
          'thead',
          {},
          h(
            'tr',
            {},
            headers.map((n) => h('th', { scope: 'col' }, n)),
          ),
        ),
        body,
      ),
    ),
    more,
  );
  await load();
}

// ---------------------------------------------------------------------------------------------
// Signing in and out.

let me = null;

async function signIn(button) {
  await busy(button, 'Waiting for the wallet…', async (step) => {
    const address = await wallet.account();
    const chain = await wallet.chainId();
    step('Asking the server for a nonce…');
    const { nonce } = await get('/api/auth/nonce');
    const message = wallet.siweMessage({ address, chain, nonce });
    step('Sign the message in your wallet…');
    const signature = await wallet.personalSign(address, message);
    step('Verifying…');
    await call('POST', '/api/auth/verify', { body: { message, signature } });
    await route();
  });
}

async function signOut(button) {
  await busy(button, 'Signing out…', async () => {
    await call('POST', '/api/auth/logout');
    me = null;
    window.location.hash = '';
    await route();
  });
}

function signedOut() {
  $('nav').hidden = true;
  $('who').replaceChildren();
  const button = h(
    'button',
    { type: 'button', class: 'primary', id: 'sign-in' },
    'Sign in with your wallet',
  );
  button.addEventListener('click', () => signIn(button));
  $('main').replaceChildren(
    h(
      'section',
      { class: 'hero' },
      h('h2', {}, 'Sign in'),
      window.location.hash.startsWith('#connect?')
        ? h(
            'p',
            { id: 'connect-note' },
            'An application asks to connect to your account: sign in to review it.',
          )
        : null,
      h(
        'p',
        {},
        'Sign in with your Ethereum wallet (Sign-In with Ethereum) to manage the API keys ',
        'your agents use, ',
        'their servers and what they paid.',
      ),
      button,
    ),
  );
}

function header() {
  $('nav').hidden = false;
  const out = h('button', { type: 'button', id: 'sign-out' }, 'Sign out');
  out.addEventListener('click', () => signOut(out));
  $('who').replaceChildren(
    h('span', { class: 'address', title: me.address }, short(me.address)),
    ' ',
    out,
  );
  for (const link of $('nav').querySelectorAll('a')) {
    link.toggleAttribute(
      'aria-current',
      link.getAttribute('href') === (window.location.hash || '#keys'),
    );
  }
}

// ---------------------------------------------------------------------------------------------
// Keys.

function policyText(policy) {
  if (!policy) return 'none';
  const parts = [];
  if (policy.maxPricePerServer) parts.push(`≤ ${policy.maxPricePerServer} USD/server`);
  if (policy.dailySpendLimit) parts.push(`${policy.dailySpendLimit} USD/day`);
  if (policy.monthlySpendLimit) parts.push(`${policy.monthlySpendLimit} USD/month`);
  if (policy.maxActiveServers) parts.push(`≤ ${policy.maxActiveServers} servers`);
  if (policy.allowedPlans) parts.push(`plans: ${policy.allowedPlans.join(', ')}`);
  if (policy.allowedRegions) parts.push(`regions: ${policy.allowedRegions.join(', ')}`);
  return parts.join('; ');
}

async function revoke(key, button) {
  const agents = [];
  let cursor = null;
  do {
    const page = await get(
      `/api/agents?limit=100${cursor ? `&cursor=${encodeURIComponent(cursor)}` : ''}`,
    );
    agents.push(...page.items.filter((a) => a.keyId === key.id && a.status === 'active'));
    cursor = page.nextCursor;
  } while (cursor);
  const body = [
    h(
      'p',
      {},
      `Revoke “${key.name}” (${key.prefix}…)? It stops working at once and cannot be restored.`,
    ),
    agents.length
      ? h(
          'div',
          {},
          h('p', {}, `It deactivates ${agents.length} agent${agents.length > 1 ? 's' : ''}:`),
          h(
            'ul',
            { id: 'revoke-agents' },
            agents.map((a) => h('li', {}, `${a.name} (${a.id})`)),
          ),
        )
      : h('p', {}, 'No active agent uses it.'),
  ];
  if (!(await confirmAction('Revoke key', body, 'Revoke'))) return;
  const row = button.closest('tr');
  await busy(button, 'Revoking…', async () => {
    const revoked = (await call('DELETE', `/api/keys/${key.id}`)).body;
    row.replaceWith(keyRow(revoked));
  });
}

/** A key's row in the list (never the key itself: only its prefix). */
function keyRow(key) {
  const button = h('button', { type: 'button', class: 'danger', 'data-key': key.id }, 'Revoke');
  button.addEventListener('click', () => revoke(key, button).catch(showError));
  return h(
    'tr',
    { 'data-key': key.id },
    h('td', {}, key.name),
    h('td', {}, h('code', {}, key.prefix)),
    h('td', {}, h('span', { class: `status ${key.status}` }, key.status)),
    h('td', {}, key.scopes.join(', ')),
    h('td', {}, policyText(key.policy)),
    h('td', {}, key.usage ? `${key.usage.spentToday} / ${key.usage.spentThisMonth} USD` : '—'),
    h('td', {}, key.usage ? key.usage.activeServers : '—'),
    h('td', {}, when(key.lastUsedAt)),
    h('td', {}, when(key.expiresAt)),
    h('td', {}, key.status === 'active' ? button : ''),
  );
}

function issuedKey(issued) {
  const value = h('code', { id: 'new-key' }, issued.key);
  const copy = h('button', { type: 'button', id: 'copy-key' }, 'Copy');
  copy.addEventListener('click', async () => {
    try {
      await navigator.clipboard.writeText(issued.key);
      copy.textContent = 'Copied';
    } catch {
      const range = document.createRange();
      range.selectNodeContents(value);
      window.getSelection().removeAllRanges();
      window.getSelection().addRange(range);
      copy.textContent = 'Selected: copy it now';
    }
  });
  const done = h('button', { type: 'button', id: 'key-done' }, 'I stored it');
  const box = h(
    'div',
    { class: 'issued', role: 'region', 'aria-label': 'New key' },
    h(
      'p',
      { class: 'warning' },
      h('strong', {}, 'Store this key now. '),
      'It is shown once: it cannot be shown again, only revoked.',
    ),
    h('p', {}, value, ' ', copy),
    done,
  );
  done.addEventListener('click', () => {
    box.remove();
  });
  return box;
}

/** The scopes' checkboxes (`name=scope`): `checked` those ticked (default: all but webhooks). */
function scopeFields(checked = ['read', 'provision', 'act', 'delete', 'renew', 'pay']) {
  const has = (scope) => checked.includes(scope);
  return h(
    'fieldset',
    {},
    h('legend', {}, 'Scopes'),
    ['read', 'provision', 'act', 'delete', 'renew', 'pay'].map((scope) =>
      h(
        'label',
        {},
        h('input', { type: 'checkbox', name: 'scope', value: scope, checked: has(scope) }),
        ` ${scope}`,
      ),
    ),
    // Never granted by default: an endpoint receives every event of the wallet, and stops
    // when the key that registered it is revoked or expires.
    h(
      'label',
      { title: 'register webhook endpoints: they receive every event of this wallet' },
      h('input', { type: 'checkbox', name: 'scope', value: 'webhooks', checked: has('webhooks') }),
      ' webhooks (asked for explicitly)',
    ),
  );
}

const POLICY_FIELDS = [
  'maxPricePerServer',
  'dailySpendLimit',
  'monthlySpendLimit',
  'maxActiveServers',
];

/** The spend policy's inputs, folded (`open`: shown), prefilled with `values` (by field). */
function policyFields(open = false, values = {}) {
  const input = (name, attrs) =>
    h('input', { name, type: 'number', ...attrs, value: values[name] && String(values[name]) });
  const usd = { min: '0.000001', step: 'any' };
  return h(
    'details',
    { open },
    h('summary', {}, 'Policy (optional)'),
    h('label', {}, 'Max price per server (USD) ', input('maxPricePerServer', usd)),
    h('label', {}, 'Daily spend limit (USD) ', input('dailySpendLimit', usd)),
    h('label', {}, 'Monthly spend limit (USD) ', input('monthlySpendLimit', usd)),
    h(
      'label',
      {},
      'Max active servers ',
      input('maxActiveServers', { min: '1', max: '1000', step: '1' }),
    ),
  );
}

/** The policy a form's inputs name, or undefined for none. */
function policyOf(data) {
  const policy = {};
  for (const field of POLICY_FIELDS) {
    if (data.get(field)) policy[field] = Number(data.get(field));
  }
  return Object.keys(policy).length ? policy : undefined;
}

async function keysPage(main) {
  const form = h(
    'form',
    { id: 'generate', class: 'inline' },
    h(
      'label',
      {},
      'Name ',
      h('input', { name: 'name', required: true, maxlength: 64, autocomplete: 'off' }),
    ),
    h('label', {}, 'Expires ', h('input', { name: 'expiresAt', type: 'datetime-local' })),
    scopeFields(),
    policyFields(),
    h('button', { type: 'submit', class: 'primary' }, 'Generate key'),
  );
  const slot = h('div', {});
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const body = { name: data.get('name'), scopes: data.getAll('scope') };
    if (data.get('expiresAt')) body.expiresAt = new Date(data.get('expiresAt')).toISOString();
    const policy = policyOf(data);
    if (policy) body.policy = policy;
    busy(form.querySelector('button[type=submit]'), 'Generating…', async () => {
      const issued = (await call('POST', '/api/keys/generate', { body })).body;
      form.reset();
      await listKeys();
      slot.replaceChildren(issuedKey(issued));
      $('copy-key').focus();
    });
  });
  const list = h('div', { id: 'keys' });
  const listKeys = async () => {
    list.replaceChildren();
    await paged(
      list,
      'API keys',
      '/api/keys?limit=20',
      [
        'Name',
        'Prefix',
        'Status',
        'Scopes',
        'Policy',
        'Spent today / month',
        'Servers',
        'Last used',
        'Expires',
        '',
      ],
      (items) => items.map(keyRow),
    );
  };
  main.append(
    h('h2', {}, 'API keys'),
    h('p', {}, 'Your agents send a key as X-API-Key. Revoking a key deactivates its agents.'),
    form,
    slot,
    list,
  );
  await listKeys();
}

// ---------------------------------------------------------------------------------------------
// Agents.

async function agentsPage(main) {
  const list = h('div', { id: 'agents' });
  main.append(
    h('h2', {}, 'Agents'),
    h('p', {}, 'Agents register themselves with their key (POST /api/agents).'),
    list,
  );
  await paged(
    list,
    'Agents',
    '/api/agents?limit=50',
    ['Name', 'Key', 'Status', 'Registered', 'Deactivated'],
    (items) =>
      items.map((agent) =>
        h(
          'tr',
          { 'data-agent': agent.id },
          h('td', {}, agent.name),
          h('td', {}, h('code', {}, agent.keyId)),
          h(
            'td',
            {},
            h('span', { class: `status ${agent.status}` }, agent.status),
            agent.deactivationReason ? ` (${agent.deactivationReason})` : '',
          ),
          h('td', {}, when(agent.createdAt)),
          h('td', {}, when(agent.deactivatedAt)),
        ),
      ),
  );
}

// ---------------------------------------------------------------------------------------------
// Servers: the owner's sandboxes that hold a server, their stage, addresses and paid time.

/** A byte count for a reader: `12.3 MB` (decimal units, as the provider counts). */
function bytes(count) {
  const units = ['B', 'kB', 'MB', 'GB', 'TB'];
  let value = Number(count);
  let unit = 0;
  while (value >= 1000 && unit < units.length - 1) {
    value /= 1000;
    unit += 1;
  }
  return `${unit ? value.toFixed(1) : value} ${units[unit]}`;
}

function addresses(sandbox) {
  if (sandbox.access && sandbox.access.ipv4) return sandbox.access.ipv4;
  const ips = (sandbox.server && sandbox.server.ip_addresses) || [];
  return (
    ips
      .map((ip) => ip.address)
      .filter(Boolean)
      .join(', ') || '—'
  );
}

/**
 * Pays for `POST path` with `body` from the signed-in wallet (x402): asks without a payment, has
 * the wallet sign the 402's offer (EIP-3009) and asks again with it. Resolves to the paid
 * answer's body and its settlement (the decoded `PAYMENT-RESPONSE`, `{}` without one); `step`
 * says where it is.
 */
async function payFor(path, body, step) {
  const offered = await call('POST', path, { body });
  if (offered.status !== 402)
    throw new Error(`Expected a payment request, got HTTP ${offered.status}.`);
  const required = decodeHeader(offered.headers.get('payment-required'));
  const offer = required.accepts[0];
  step(`Sign the payment of ${usdc(offer.amount)} in your wallet…`);
  const address = await wallet.account();
  const payment = await wallet.pay(address, required);
  step('Settling the payment…');
  const paid = await call('POST', path, {
    body,
    headers: { 'payment-signature': encodeHeader(payment) },
  });
  if (paid.status === 402) {
    throw new ProblemError(402, {
      title: 'Payment refused',
      detail: (paid.body && paid.body.error) || 'the payment was refused',
    });
  }
  const settlement = paid.headers.get('payment-response')
    ? decodeHeader(paid.headers.get('payment-response'))
    : {};
  return { paid: paid.body, settlement };
}

/** After a payment: the page again, topped by a notice `id` saying `done` and what settled. */
async function paidNotice(id, done, amount, settlement) {
  await route();
  $('alert').hidden = true;
  const notice = h(
    'p',
    { class: 'notice', id, role: 'status' },
    `${done} `,
    `Settled ${usdc(amount)}`,
    settlement.transaction ? [' in transaction ', h('code', {}, settlement.transaction)] : '',
    '.',
  );
  $('main').prepend(notice);
}

async function renew(sandbox, button) {
  const path = `/api/cloud/servers/${sandbox.serverId}/renewals`;
  await busy(button, 'Renewing…', async (step) => {
    const { paid, settlement } = await payFor(path, { periods: 1 }, step);
    const done = `Renewed server ${sandbox.serverId}: paid until ${when(paid.paidUntil)}.`;
    await paidNotice('renewed', done, paid.amount, settlement);
  });
}

/**
 * The VPS plans `sandbox`'s server can be offered to move to: in stock in its region, other than
 * its own, cheapest first (none for a server whose plan is no VPS plan of `plans`). Only a
 * dearer one is sold: the quote of another says why not.
 */
function resizePlans(sandbox, plans) {
  const vps = plans.filter((plan) => plan.type === 'vps');
  if (!vps.some((plan) => plan.slug === sandbox.plan)) return [];
  const stocked = (plan) =>
    (plan.available_regions || []).some((r) => r.slug === sandbox.region && r.stock_qty > 0);
  return vps
    .filter((plan) => plan.slug !== sandbox.plan && stocked(plan))
    .sort((a, b) => (a.monthlyCost ?? Infinity) - (b.monthlyCost ?? Infinity));
}

/**
 * Moves a paid server to `plan`: its quote first (the difference for the paid hours left), then,
 * once confirmed, paid from the wallet as a renewal is. Its paid time is kept.
 */
async function resize(sandbox, plan, button) {
  const id = sandbox.serverId;
  const query = `serverId=${id}&plan=${encodeURIComponent(plan)}`;
  const quote = await busy(button, 'Pricing…', () => get(`/api/cloud/quote?${query}`));
  if (!quote) return;
  const { fromPlan, hoursLeft } = quote.price.resize || {};
  const ok = await confirmAction(
    'Resize server',
    [
      h(
        'p',
        {},
        `Move server ${id} from plan ${fromPlan || sandbox.plan} to plan ${plan}? The provider `,
        `reboots it; it stays paid until ${when(sandbox.paidUntil)}.`,
      ),
      h(
        'p',
        { id: 'resize-quote' },
        `The difference for the ${hoursLeft} h of paid time left: `,
        h('strong', {}, `${quote.amountUsd} USD`),
        ` (${usdc(quote.amount)}).`,
      ),
    ],
    'Pay and resize',
  );
  if (!ok) return;
  const path = `/api/cloud/servers/${id}/resizes`;
  await busy(button, 'Resizing…', async (step) => {
    const { paid, settlement } = await payFor(path, { plan }, step);
    const done =
      `Resized server ${id} from ${paid.from} to ${paid.plan}: ` +
      `paid until ${when(paid.paidUntil)}.`;
    await paidNotice('resized', done, paid.amount, settlement);
  });
}

async function act(sandbox, type, button) {
  await busy(button, 'Sending…', async () => {
    await call('POST', `/api/cloud/servers/${sandbox.serverId}/actions`, { body: { type } });
    await route();
  });
}

/** A strong password the provider takes (it is never shown again; log in with a key). */
function strongPassword() {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return `Aa1-${Array.from(bytes, (b) => b.toString(16).padStart(2, '0')).join('')}`;
}

/** Rebuilds a server (wipes its disk), with the image, hostname and SSH keys picked. */
async function rebuild(sandbox, button) {
  // A key whose API key was revoked is disabled: never offered.
  const keys = (await get('/api/ssh-keys?limit=100')).items.filter((key) => !key.disabled);
  const picker = h(
    'fieldset',
    { id: 'rebuild-keys' },
    h('legend', {}, 'SSH keys to log in with'),
    keys.length
      ? keys.map((key) =>
          h(
            'label',
            { class: 'key-choice' },
            h('input', { type: 'checkbox', name: 'sshKeys', value: key.id, checked: true }),
            ` ${key.name} `,
            h('code', {}, key.fingerprint),
          ),
        )
      : h('p', {}, 'No SSH keys yet: add one under SSH keys.'),
  );
  const image = h('input', {
    name: 'image',
    required: true,
    value: (sandbox.server && sandbox.server.deployed_image && sandbox.server.deployed_image.slug) || '',
  });
  const hostname = h('input', { name: 'hostname', required: true, value: sandbox.hostname || '' });
  const ok = await confirmAction(
    'Rebuild server',
    [
      h('p', {}, `Rebuild server ${sandbox.serverId}? Its disk is wiped and the image installed again.`),
      h('label', {}, 'Image ', image),
      h('label', {}, 'Hostname ', hostname),
      picker,
    ],
    'Rebuild',
  );
  if (!ok) return;
  const sshKeys = [...picker.querySelectorAll('input:checked')].map((input) => input.value);
  await busy(button, 'Rebuilding…', async () => {
    const body = {
      type: 'rebuild',
      image: image.value.trim(),
      hostname: hostname.value.trim(),
      password: strongPassword(),
      sshKeys,
    };
    await call('POST', `/api/cloud/servers/${sandbox.serverId}/actions`, { body });
    await route();
  });
}

async function remove(sandbox, button) {
  const ok = await confirmAction(
    'Delete server',
    h(
      'p',
      {},
      `Delete server ${sandbox.serverId} (${sandbox.hostname || sandbox.id})? It is destroyed at `,
      'the provider with its data; paid time left is not refunded.',
    ),
    'Delete',
  );
  if (!ok) return;
  await busy(button, 'Deleting…', async () => {
    await call('DELETE', `/api/cloud/servers/${sandbox.serverId}`);
    await route();
  });
}

function serverRow(sandbox, plans) {
  const actions = h('div', { class: 'actions' });
  const button = (label, handler, cls) => {
    const b = h(
      'button',
      { type: 'button', class: cls, 'data-action': label.toLowerCase().replace(/ /g, '-') },
      label,
    );
    b.addEventListener('click', () => handler(b));
    actions.append(b);
  };
  const ended = ['terminated', 'failed'].includes(sandbox.stage);
  if (sandbox.serverId && !ended) {
    if (sandbox.paidUntil) {
      button('Renew', (b) => renew(sandbox, b), 'primary');
      const choices = resizePlans(sandbox, plans);
      if (choices.length) {
        // The first plan dearer than its own is chosen: a cheaper one is refused.
        const own = plans.find((plan) => plan.slug === sandbox.plan);
        const dearer = choices.find((plan) => plan.monthlyCost > own.monthlyCost);
        const select = h(
          'select',
          { name: 'plan', 'aria-label': `Plan to resize server ${sandbox.serverId} to` },
          choices.map((plan) =>
            h(
              'option',
              { value: plan.slug, selected: plan === dearer },
              plan.slug,
              typeof plan.monthlyCost === 'number' ? ` (${plan.monthlyCost} USD/month)` : '',
            ),
          ),
        );
        actions.append(select);
        button('Resize', (b) => resize(sandbox, select.value, b));
      }
    }
    if (sandbox.power === 'off') button('Power on', (b) => act(sandbox, 'power-on', b));
    else button('Power off', (b) => act(sandbox, 'power-off', b));
    button('Reboot', (b) => act(sandbox, 'reboot', b));
    button('Rebuild', (b) => rebuild(sandbox, b));
    button('Delete', (b) => remove(sandbox, b), 'danger');
  }
  actions.append(h('a', { href: `#events/${sandbox.id}`, class: 'events' }, 'Events'));
  return h(
    'tr',
    { 'data-server': sandbox.serverId || '', 'data-sandbox': sandbox.id },
    h('td', {}, sandbox.serverId || '—', h('br'), h('small', {}, sandbox.hostname || sandbox.id)),
    h('td', {}, sandbox.plan || '—', h('br'), h('small', {}, sandbox.region || '')),
    h(
      'td',
      {},
      h(
        'span',
        { class: `stage ${sandbox.stage || sandbox.status}` },
        sandbox.stage || sandbox.status,
      ),
      sandbox.transition ? h('small', {}, ` ${sandbox.transition}`) : '',
    ),
    h(
      'td',
      {},
      addresses(sandbox),
      sandbox.trafficUsedBytes === undefined
        ? ''
        : [h('br'), h('small', { class: 'traffic' }, `traffic ${bytes(sandbox.trafficUsedBytes)}`)],
    ),
    h(
      'td',
      { class: 'lease' },
      sandbox.paidUntil
        ? [
            `paid until ${when(sandbox.paidUntil)}`,
            h('br'),
            h('small', {}, `grace until ${when(sandbox.graceEndsAt)}`),
            sandbox.expiresSoon ? h('strong', {}, ' expires soon') : '',
          ]
        : 'free',
    ),
    h('td', {}, actions),
  );
}

async function serversPage(main) {
  const list = h('div', { id: 'servers' });
  main.append(
    h('h2', {}, 'Servers'),
    h(
      'p',
      {},
      'Servers your agents provisioned, newest first. Stages: ordered → deploying → ',
      'network-ready → ready.',
    ),
    list,
  );
  // The plans a paid server can be resized to: without them (the provider unreachable) the
  // servers are listed all the same, with no Resize.
  const plans = await get('/api/cloud/plans').catch(() => []);
  await paged(
    list,
    'Servers',
    '/api/sandboxes?limit=20',
    ['Server', 'Plan', 'Stage', 'Addresses', 'Paid time', 'Actions'],
    (items) =>
      items
        .filter((s) => s.serverId || s.status === 'provisioning')
        .map((s) => serverRow(s, plans)),
  );
}

// ---------------------------------------------------------------------------------------------
// SSH keys: the public keys agents log in with, put on servers by provisioning or a rebuild.

function sshKeyRow(key) {
  const row = h(
    'tr',
    { 'data-ssh-key': key.id },
    h('td', {}, key.name, key.disabled && h('div', { class: 'warning' }, `Disabled: ${key.disabled}`)),
    h('td', {}, h('code', { class: 'fingerprint' }, key.fingerprint)),
    h('td', {}, key.algorithm),
    h('td', {}, when(key.createdAt)),
    h('td', {}),
  );
  const remove = h('button', { type: 'button', class: 'danger', 'data-action': 'delete' }, 'Delete');
  remove.addEventListener('click', () =>
    busy(remove, 'Deleting…', async () => {
      const sure = await confirmAction(
        'Delete SSH key',
        `Delete ${key.name} (${key.fingerprint})? Servers made with it keep it.`,
        'Delete',
      );
      if (!sure) return;
      await call('DELETE', `/api/ssh-keys/${key.id}`);
      row.remove();
    }),
  );
  row.lastChild.append(remove);
  return row;
}

async function sshKeysPage(main) {
  const form = h(
    'form',
    { id: 'add-ssh-key' },
    h('label', {}, 'Name ', h('input', { name: 'name', placeholder: 'from the key' })),
    h(
      'label',
      {},
      'Public key ',
      h('textarea', {
        name: 'publicKey',
        required: true,
        rows: 3,
        cols: 60,
        placeholder: 'ssh-ed25519 AAAA… you@host (the contents of ~/.ssh/id_ed25519.pub)',
      }),
    ),
    h('button', { type: 'submit' }, 'Add key'),
  );
  const list = h('div', { id: 'ssh-keys' });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const name = String(data.get('name') || '').trim();
    const body = { publicKey: String(data.get('publicKey')), ...(name ? { name } : {}) };
    busy(form.querySelector('button'), 'Adding…', async () => {
      const added = await call('POST', '/api/ssh-keys', { body });
      const tbody = list.querySelector('tbody');
      tbody.querySelector('tr.empty')?.remove();
      tbody.querySelector(`tr[data-ssh-key="${added.body.id}"]`)?.remove();
      tbody.prepend(sshKeyRow(added.body));
      form.reset();
    });
  });
  main.append(
    h('h2', {}, 'SSH keys'),
    h(
      'p',
      {},
      'Public keys your agents log in to their servers with. Name one (its id, ssh_…) or paste ',
      'it in sshKeys when provisioning or rebuilding; only your keys reach your servers.',
    ),
    form,
    list,
  );
  await paged(
    list,
    'SSH keys',
    '/api/ssh-keys?limit=50',
    ['Name', 'Fingerprint', 'Algorithm', 'Added', ''],
    (items) => items.map(sshKeyRow),
  );
}

// ---------------------------------------------------------------------------------------------
// Payments.

async function paymentsPage(main) {
  const list = h('div', { id: 'payments' });
  main.append(
    h('h2', {}, 'Payments'),
    h('p', {}, 'Every x402 payment, and credits to redeem.'),
    list,
  );
  await paged(
    list,
    'Payments',
    '/api/payments?limit=20',
    ['When', 'State', 'Amount', 'Server', 'Transaction', 'Credit'],
    (items) =>
      items.map((p) =>
        h(
          'tr',
          { 'data-payment': p.orderId },
          h('td', {}, when(p.createdAt)),
          h(
            'td',
            {},
            h('span', { class: `status ${p.state}` }, p.state),
            p.reason ? h('small', {}, ` ${p.reason}`) : '',
          ),
          h('td', {}, usdc(p.amount)),
          h('td', {}, p.serverId || '—'),
          h(
            'td',
            {},
            p.transaction ? h('code', { title: p.transaction }, short(p.transaction)) : '—',
          ),
          h(
            'td',
            {},
            p.credit
              ? `${usdc(p.credit.amount)}${p.credit.redeemable ? ' (redeemable)' : ''}`
              : '—',
          ),
        ),
      ),
  );
}

// ---------------------------------------------------------------------------------------------
// Events: what happened to the owner's servers, leases, payments and keys, oldest first; one
// server's alone at `#events/<sandbox id>`.

/** What an event's data says in a few words. */
function eventSummary(event) {
  const d = event.data || {};
  switch (event.type) {
    case 'payment.settled':
    case 'payment.credited':
    case 'payment.refunded':
    case 'payment.reversed':
      return `${usdc(d.amount)}${d.reason ? ` — ${d.reason}` : ''}`;
    case 'server.ready':
      return `${d.address || ''} ${(d.hostKeys || []).map((k) => k.fingerprint).join(' ')}`;
    case 'server.failed':
      return d.reason || '';
    case 'server.power_changed':
      return `power ${d.power}${d.by ? ` (${d.by})` : ''}`;
    case 'server.resized':
      return `${d.from} → ${d.plan} for ${usdc(d.amount)}`;
    case 'lease.expiring':
      return `ends ${when(d.paidUntil)}; renew: POST ${d.renew?.href || ''}`;
    case 'lease.renewed':
    case 'lease.expired':
      return `paid until ${when(d.paidUntil)}`;
    case 'server.deleted':
      return `by ${d.by}`;
    case 'key.revoked':
      return d.name || '';
    case 'agent.deactivated':
      return `${(d.agentIds || []).length} agent(s)`;
    case 'approval.requested':
    case 'approval.granted':
    case 'approval.declined':
      return d.request ? asked(d.request) : '';
    case 'webhook.delivery_failed':
      return `${d.eventType || ''} to ${d.endpointId || ''}: ${d.reason || ''}`;
    default:
      return '';
  }
}

async function eventsPage(main, subject) {
  const list = h('div', { id: 'events' });
  main.append(
    h('h2', {}, subject ? `Events of ${subject}` : 'Events'),
    h(
      'p',
      {},
      'What happened to your servers, their paid time, your payments and keys, oldest first. ',
      subject ? h('a', { href: '#events' }, 'All events') : '',
    ),
    list,
  );
  const query = subject ? `&subject=${encodeURIComponent(subject)}` : '';
  await paged(
    list,
    'Events',
    `/api/events?limit=50${query}`,
    ['When', 'Event', 'Subject', 'Details'],
    (items) =>
      items.map((e) =>
        h(
          'tr',
          { 'data-event': e.id },
          h('td', {}, when(e.occurredAt)),
          h('td', {}, h('span', { class: 'event' }, e.type)),
          h(
            'td',
            {},
            e.subject.kind === 'server'
              ? h('a', { href: `#events/${e.subject.id}` }, e.data?.serverId || e.subject.id)
              : h('code', { title: e.subject.id }, short(e.subject.id)),
          ),
          h('td', {}, eventSummary(e)),
        ),
      ),
    'after',
    true,
  );
}

// ---------------------------------------------------------------------------------------------
// Webhooks: endpoints that receive the events, signed (Standard Webhooks); a disabled one says
// why; one endpoint's deliveries at `#webhooks/<id>`.

/** A new signing secret, shown once. */
function issuedSecret(secret) {
  const box = h(
    'div',
    { class: 'issued', role: 'region', 'aria-label': 'New signing secret' },
    h(
      'p',
      { class: 'warning' },
      h('strong', {}, 'Store this signing secret now. '),
      'It is shown once; your receiver verifies webhook-signature with it.',
    ),
    h('p', {}, h('code', { id: 'new-secret' }, secret)),
  );
  const done = h('button', { type: 'button' }, 'I stored it');
  done.addEventListener('click', () => box.remove());
  box.append(done);
  return box;
}

/** What an endpoint's status says, with why it was disabled. */
function endpointStatus(endpoint) {
  if (endpoint.disabled) {
    return h(
      'span',
      {},
      h('span', { class: 'status disabled' }, 'disabled'),
      ' ',
      h('span', { class: 'reason' }, `${when(endpoint.disabled.at)}: ${endpoint.disabled.reason}`),
    );
  }
  const failing = endpoint.failingSince ? ` (failing since ${when(endpoint.failingSince)})` : '';
  return h('span', { class: 'status active' }, `enabled${failing}`);
}

/** A test delivery once it was tried (its endpoint's deliveries read every second, 30 s at
 * most), or as it last stood. */
async function testOutcome(endpointId, deliveryId) {
  let delivery = { status: 'pending' };
  for (let i = 0; i < 30 && delivery.status === 'pending'; i += 1) {
    await new Promise((resolve) => setTimeout(resolve, 1000));
    const page = (await call('GET', `/api/webhooks/${endpointId}/deliveries?limit=20`)).body;
    delivery = page.items.find((d) => d.id === deliveryId) || delivery;
  }
  return delivery;
}

function endpointRow(endpoint, notices) {
  const act = (label, doing, action) => {
    const button = h('button', { type: 'button', 'data-action': label }, label);
    button.addEventListener('click', () => busy(button, doing, action));
    return button;
  };
  const row = h(
    'tr',
    { 'data-webhook': endpoint.id },
    h('td', {}, h('code', {}, endpoint.url)),
    h('td', {}, endpointStatus(endpoint)),
    h('td', {}, endpoint.types.length ? endpoint.types.join(', ') : 'every type'),
    h('td', {}, when(endpoint.createdAt)),
    h(
      'td',
      { class: 'actions' },
      h('a', { href: `#webhooks/${endpoint.id}` }, 'Deliveries'),
      ' ',
      act('Test', 'Sending…', async () => {
        // Queued (202, pending): the delivery function sends it; its outcome is read from the
        // endpoint's deliveries.
        const queued = (await call('POST', `/api/webhooks/${endpoint.id}/test`)).body;
        notices.replaceChildren(h('p', { role: 'status' }, 'Test event: queued…'));
        const delivery = await testOutcome(endpoint.id, queued.id);
        const said =
          delivery.status === 'delivered'
            ? 'delivered'
            : delivery.status === 'pending'
              ? 'still queued (see the deliveries)'
              : delivery.lastError;
        notices.replaceChildren(h('p', { role: 'status' }, `Test event: ${said}`));
      }),
      ' ',
      act('Rotate secret', 'Rotating…', async () => {
        const rotated = (await call('POST', `/api/webhooks/${endpoint.id}/rotate`)).body;
        notices.replaceChildren(issuedSecret(rotated.secret));
      }),
      ' ',
      act('Delete', 'Deleting…', async () => {
        const sure = await confirmAction('Delete endpoint', `Stop sending to ${endpoint.url}?`, 'Delete');
        if (!sure) return;
        await call('DELETE', `/api/webhooks/${endpoint.id}`);
        row.remove();
      }),
    ),
  );
  return row;
}

async function webhooksPage(main, endpointId) {
  if (endpointId) {
    await deliveriesPage(main, endpointId);
    return;
  }
  const notices = h('div', { id: 'webhook-notices' });
  const form = h(
    'form',
    { id: 'register-webhook', class: 'inline' },
    h('label', {}, 'URL ', h('input', { name: 'url', type: 'url', required: true, size: 40 })),
    h('label', {}, 'Types ', h('input', { name: 'types', placeholder: 'every type' })),
    h('button', { type: 'submit' }, 'Add endpoint'),
  );
  const list = h('div', { id: 'webhooks' });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    const types = String(data.get('types') || '')
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean);
    const body = { url: data.get('url'), ...(types.length ? { types } : {}) };
    busy(form.querySelector('button'), 'Adding…', async () => {
      const created = (await call('POST', '/api/webhooks', { body })).body;
      notices.replaceChildren(issuedSecret(created.secret));
      list.querySelector('tbody tr.empty')?.remove();
      list.querySelector('tbody').append(endpointRow(created, notices));
      form.reset();
    });
  });
  main.append(
    h('h2', {}, 'Webhooks'),
    h('p', {}, 'Endpoints that receive your events as they happen, signed and retried.'),
    form,
    notices,
    list,
  );
  await paged(list, 'Webhook endpoints', '/api/webhooks', ['URL', 'Status', 'Types', 'Added', ''], (items) =>
    items.map((e) => endpointRow(e, notices)),
  );
}

async function deliveriesPage(main, endpointId) {
  const list = h('div', { id: 'deliveries' });
  main.append(
    h('h2', {}, 'Deliveries'),
    h('p', {}, h('a', { href: '#webhooks' }, 'All endpoints')),
    list,
  );
  await paged(
    list,
    'Deliveries',
    `/api/webhooks/${encodeURIComponent(endpointId)}/deliveries?limit=50`,
    ['Queued', 'Event', 'Status', 'Attempts', 'Last error', 'Next try'],
    (items) =>
      items.map((d) =>
        h(
          'tr',
          { 'data-delivery': d.id },
          h('td', {}, when(d.createdAt)),
          h('td', {}, h('span', { class: 'event' }, d.event.type)),
          h('td', {}, h('span', { class: `status ${d.status}` }, d.status)),
          h('td', {}, d.attempts),
          h('td', {}, d.lastError || '—'),
          h('td', {}, when(d.nextAttemptAt)),
        ),
      ),
  );
}

// ---------------------------------------------------------------------------------------------
// Routing.

// ---------------------------------------------------------------------------------------------
// Approvals: a key's paid request over its policy, granted with one signature or declined.

/** What an approval asks, in one line. */
function asked(r) {
  const what = r.what === 'renewal' ? `renew server ${r.serverId} (${r.periods} period(s))` : 'a new server';
  return `${what}: ${r.plan} in ${r.region}${r.image ? ` (${r.image})` : ''}, ${r.price} USD`;
}

async function approvalsPage(main, id) {
  if (id) {
    await approvalPage(main, id);
    return;
  }
  const list = h('div', { id: 'approvals' });
  main.append(
    h('h2', {}, 'Approvals'),
    h(
      'p',
      {},
      'Requests of your agents that their key\'s policy refused: approve one with your wallet ',
      'and the agent\'s next identical request goes through, once.',
    ),
    list,
  );
  await paged(list, 'Approvals', '/api/approvals', ['Asked', 'Key', 'Why', 'State', 'Asked at'], (items) =>
    items.map((a) =>
      h(
        'tr',
        {},
        h('td', {}, h('a', { href: `#approvals/${a.id}` }, asked(a.request))),
        h('td', {}, a.request.keyName || short(a.request.key)),
        h('td', {}, a.reason.limit),
        h('td', {}, a.state),
        h('td', {}, when(a.createdAt)),
      ),
    ),
  );
}

/** One approval: what the agent asks, why its policy refused it, and approve or decline. */
async function approvalPage(main, id) {
  const approval = await get(`/api/approvals/${encodeURIComponent(id)}`);
  const r = approval.request;
  const row = (name, ...value) => h('tr', {}, h('th', { scope: 'row' }, name), h('td', {}, ...value));
  const actions = h('div', { class: 'actions' });
  main.append(
    h('h2', {}, 'Approve a request of your agent'),
    h('p', { id: 'approval-state' }, `This approval is ${approval.state}.`),
    h(
      'table',
      { id: 'approval' },
      h(
        'tbody',
        {},
        row('Asks', asked(r)),
        row('Price', `${r.price} USD`),
        row('Route', r.route),
        row('Key', `${r.keyName || ''} (${r.key})`),
        row('Agents', (r.agents || []).join(', ') || '—'),
        row('Refused by', `${approval.reason.limit}: ${approval.reason.message}`),
        row('Expires', when(approval.expiresAt)),
      ),
    ),
    actions,
  );
  if (approval.state !== 'pending') return;
  const approve = h('button', { type: 'button', class: 'primary', id: 'approve' }, 'Approve with your wallet');
  const decline = h('button', { type: 'button', id: 'decline' }, 'Decline');
  approve.addEventListener('click', () =>
    busy(approve, 'Waiting for the wallet…', async (step) => {
      const address = await wallet.account();
      const chain = await wallet.chainId();
      step('Asking the server for a nonce…');
      const { nonce } = await get('/api/auth/nonce');
      const message = wallet.siweMessage({
        address,
        chain,
        nonce,
        statement: `Approve ${asked(r)}, asked by key ${r.keyName || r.key}.`,
        resources: [approval.resource],
      });
      step('Sign the approval in your wallet…');
      const signature = await wallet.personalSign(address, message);
      step('Approving…');
      await call('POST', `/api/approvals/${encodeURIComponent(id)}/grant`, { body: { message, signature } });
      await route();
    }),
  );
  decline.addEventListener('click', () =>
    busy(decline, 'Declining…', async () => {
      await call('POST', `/api/approvals/${encodeURIComponent(id)}/decline`);
      await route();
    }),
  );
  actions.append(approve, ' ', decline);
}

// ---------------------------------------------------------------------------------------------
// Connecting an application (MCP over OAuth): the authorization request the server checked,
// shown for consent; approving issues it a new API key with the scopes and policy chosen.

/** Where a redirect URI sends the token, for a human: its origin, or "this computer". */
function destination(uri) {
  try {
    const url = new URL(uri);
    if (url.protocol === 'http:') return `this computer (${url.host})`;
    if (url.protocol === 'https:') return url.origin;
    return `the app that opens ${url.protocol} links`;
  } catch {
    return uri;
  }
}

/** A `datetime-local` input's value for `date`, in this computer's time zone. */
function localInput(date) {
  const local = new Date(date.getTime() - date.getTimezoneOffset() * 60000);
  return local.toISOString().slice(0, 16);
}

// What a connection is given unless the human chooses otherwise (the server's defaults too):
// a key that expires, a monthly spend limit, and the scopes asked for but `delete`.
const GRANT_DAYS = 90;
const GRANT_POLICY = { monthlySpendLimit: 100 };
const DEFAULT_SCOPES = ['read', 'provision', 'act', 'delete', 'renew', 'pay'];

async function connectPage(main, query) {
  const request = new URLSearchParams(query);
  const clientId = encodeURIComponent(request.get('client_id') || '');
  const client = await get(`/api/oauth/clients/${clientId}`);
  const redirectUri = request.get('redirect_uri') || '';
  const asked = (request.get('scope') || '').split(' ').filter(Boolean);
  const row = (name, ...value) =>
    h('tr', {}, h('th', { scope: 'row' }, name), h('td', {}, ...value));
  const until = new Date(Date.now() + GRANT_DAYS * 86400000);
  const form = h(
    'form',
    { id: 'connect' },
    scopeFields((asked.length ? asked : DEFAULT_SCOPES).filter((scope) => scope !== 'delete')),
    h(
      'label',
      {},
      'Expires ',
      h('input', { name: 'expiresAt', type: 'datetime-local', value: localInput(until) }),
      ` (empty: in ${GRANT_DAYS} days)`,
    ),
    policyFields(true, GRANT_POLICY),
    h('button', { type: 'submit', class: 'primary', id: 'approve-connect' }, 'Connect'),
    ' ',
    h('button', { type: 'button', id: 'deny-connect' }, 'Deny'),
  );
  const answer = (button, label, body) =>
    busy(button, label, async () => {
      const consent = { body: { request: query, ...body } };
      const answer = await call('POST', '/api/oauth/consent', consent);
      window.location.assign(answer.body.redirectTo);
    });
  form.addEventListener('submit', (event) => {
    event.preventDefault();
    const data = new FormData(form);
    // Every policy field emptied: the human chose no limit.
    const body = { approve: true, scopes: data.getAll('scope'), policy: policyOf(data) || {} };
    if (data.get('expiresAt')) body.expiresAt = new Date(data.get('expiresAt')).toISOString();
    answer(form.querySelector('#approve-connect'), 'Connecting…', body);
  });
  form.querySelector('#deny-connect').addEventListener('click', (event) =>
    answer(event.currentTarget, 'Denying…', { approve: false }),
  );
  main.append(
    h('h2', {}, 'Connect an application'),
    h(
      'p',
      {},
      'An application asks to use this API as you. Connecting gives it a new API key with the ',
      'scopes and spend policy you choose below; revoke that key on the Keys page to ',
      'disconnect it.',
    ),
    h(
      'table',
      { id: 'client' },
      h(
        'tbody',
        {},
        row('Application', `${client.name} (as it names itself)`),
        row('Home page', client.uri || '—'),
        row('Sends the token to', h('strong', {}, destination(redirectUri)), ` — ${redirectUri}`),
        row('Asks for', asked.join(', ') || 'the default scopes'),
      ),
    ),
    form,
  );
}

const pages = {
  '#keys': keysPage,
  '#approvals': approvalsPage,
  '#agents': agentsPage,
  '#servers': serversPage,
  '#ssh-keys': sshKeysPage,
  '#payments': paymentsPage,
  '#events': eventsPage,
  '#webhooks': webhooksPage,
};

async function route() {
  clearError();
  try {
    me = await get('/api/auth/me');
  } catch (error) {
    if (error instanceof ProblemError && error.status === 401) {
      me = null;
    } else {
      showError(error);
      return;
    }
  }
  if (!me) {
    signedOut();
    return;
  }
  header();
  const hash = window.location.hash;
  if (hash.startsWith('#connect?')) {
    await show(connectPage, hash.slice('#connect?'.length));
    return;
  }
  const nested = ['#events', '#webhooks', '#approvals'].find((s) => hash.startsWith(`${s}/`));
  const [section, subject] = nested ? [nested, hash.slice(nested.length + 1)] : [hash];
  await show(pages[section] || keysPage, subject);
}

/** Shows `page` (of `subject`) in the main area. */
async function show(page, subject) {
  const main = $('main');
  main.replaceChildren();
  main.setAttribute('aria-busy', 'true');
  try {
    await page(main, subject);
  } catch (error) {
    showError(error);
  } finally {
    main.removeAttribute('aria-busy');
  }
}

window.addEventListener('hashchange', () => {
  // The new section takes the focus, unless the human is already typing in it (a form shows
  // before its list has loaded).
  route().then(() => {
    if (!$('main').contains(document.activeElement)) $('main').focus();
  });
});
route();
