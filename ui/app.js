// SPDX-License-Identifier: MIT
// shmlockd's web view (docs/web-view.md): one long poll at a time against
// /ui/api/state, which the broker answers when the segment changed (or
// after 25 s); the countdowns tick here between answers. The broker pages,
// sorts and filters the keys, so an answer carries one page of rows.
// Every text from the broker goes in with textContent: key and session
// names are any bytes a local user chose.
'use strict';
(function () {
	const st = { q: '', sort: 'key', dir: 'asc', offset: 0, limit: 50, stamp: '', data: null,
		     got: 0 };
	let token = new URLSearchParams(location.hash.slice(1)).get('token');
	if (token)
		sessionStorage.setItem('shmlock-token', token);
	else
		token = sessionStorage.getItem('shmlock-token') || '';
	let ctl = null;

	const $ = (id) => document.getElementById(id);
	function el(tag, attrs, ...kids) {
		const e = document.createElement(tag);
		for (const [k, v] of Object.entries(attrs || {}))
			if (k === 'class') e.className = v; else e.setAttribute(k, v);
		for (const k of kids)
			if (k !== null && k !== undefined)
				e.append(typeof k === 'object' ? k : String(k));
		return e;
	}
	const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

	function dur(ms) {
		if (ms < 1000) return ms + ' ms';
		const s = ms / 1000;
		if (s < 60) return s.toFixed(1) + ' s';
		if (s < 3600) return Math.floor(s / 60) + ' min ' + Math.floor(s % 60) + ' s';
		return Math.floor(s / 3600) + ' h ' + Math.floor((s % 3600) / 60) + ' min';
	}
	// A clock element: counts up (held for) or down (lock-delay, lease, TTL)
	// from the value the broker gave at st.got.
	function clock(ms, down, fmt) {
		const e = el('span', { class: 'clock', 'data-ms': ms, 'data-down': down ? 1 : 0 });
		e._fmt = fmt;
		e.textContent = fmt(ms);
		return e;
	}
	function tick() {
		const dt = performance.now() - st.got;
		for (const e of document.querySelectorAll('.clock')) {
			const ms = Number(e.dataset.ms);
			const v = e.dataset.down === '1' ? Math.max(0, ms - dt) : ms + dt;
			e.textContent = e._fmt(Math.round(v));
		}
	}

	function who(x) {
		return (x.name || '(unnamed)') + ' (pid ' + x.pid + ')';
	}

	// A key, breakable only after its separators (/ . - _ : and so on),
	// never inside a word; the whole key in its title.
	function keyText(key) {
		const e = el('span', { class: 'keytext', title: key });
		for (const part of key.split(/(?<=[\/.\-_:@=,])/))
			e.append(part, document.createElement('wbr'));
		return e;
	}

	const hhmmss = (t) => new Date(t).toLocaleTimeString([], { hour12: false });
	// When a hold was granted, as wall-clock time: the broker's held_ms at
	// the answer's arrival. A hold older than the broker's first look is
	// at least that old.
	function granted(h) {
		const at = st.gotWall - h.held_ms;
		return el('span', { class: 'granted', 'data-granted': at,
				    'data-at-least': h.held_at_least ? 1 : 0 },
			  h.held_at_least ? 'granted before ' + hhmmss(at) : 'granted ' + hhmmss(at),
			  ', held ' + (h.held_at_least ? '≥ ' : ''),
			  clock(h.held_ms, false, dur));
	}

	// ---- charts: small SVGs of what the metrics count ----
	const SVG = 'http://www.w3.org/2000/svg';
	function svg(tag, attrs, ...kids) {
		const e = document.createElementNS(SVG, tag);
		for (const [k, v] of Object.entries(attrs || {}))
			e.setAttribute(k, v);
		for (const k of kids)
			e.append(typeof k === 'object' ? k : String(k));
		return e;
	}
	const W = 320, H = 120, PAD = 18;
	function durLabel(us) {
		return us < 1000 ? us + 'µs' : us < 1e6 ? us / 1000 + 'ms' : us / 1e6 + 's';
	}
	// Bars, one per bucket: how many waits (holds) lasted up to each bound.
	function histChart(id, hist) {
		const n = hist.buckets.length + 1;
		const vals = hist.buckets.concat([hist.over]);
		const max = Math.max(1, ...vals);
		const bw = (W - 2 * PAD) / n;
		const g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart', role: 'img',
				      'data-total': vals.reduce((a, b) => a + b, 0) });
		vals.forEach((v, i) => {
			const h = Math.round((H - 2 * PAD) * v / max);
			const label = i < hist.bounds_us.length ? '≤ ' + durLabel(hist.bounds_us[i]) :
				'> ' + durLabel(hist.bounds_us[hist.bounds_us.length - 1]);
			g.append(svg('rect', { x: PAD + i * bw + 1, y: H - PAD - h, width: bw - 2,
					       height: h, class: 'bar', 'data-count': v },
				      svg('title', {}, label + ': ' + v)));
			if (i % 2 === 0 || i === n - 1)
				g.append(svg('text', { x: PAD + i * bw + bw / 2, y: H - 4,
						       'text-anchor': 'middle', class: 'axis' },
					      i < hist.bounds_us.length ? durLabel(hist.bounds_us[i]) : '∞'));
		});
		g.append(svg('text', { x: PAD, y: 12, class: 'axis' },
			     vals.some((v) => v) ? 'max ' + max : 'none counted yet'));
		$(id).replaceChildren(g);
	}
	// Grants per second between the broker's samples.
	function grantsChart(id, gr) {
		const s = gr.samples, rates = [];
		for (let i = 1; i < s.length; i++)
			rates.push(Math.max(0, s[i] - s[i - 1]) / gr.every_s);
		if (s.length && gr.now_after_ms > 0)  // since the last sample
			rates.push(Math.max(0, gr.now - s[s.length - 1]) * 1000 / gr.now_after_ms);
		const max = Math.max(1, ...rates);
		const g = svg('svg', { viewBox: '0 0 ' + W + ' ' + H, class: 'chart', role: 'img',
				      'data-samples': s.length });
		const x = (i) => PAD + (W - 2 * PAD) * (rates.length < 2 ? 1 : i / (rates.length - 1));
		const y = (v) => H - PAD - (H - 2 * PAD) * v / max;
		if (rates.length)
			g.append(svg('polyline', { class: 'line', fill: 'none',
						   points: rates.map((v, i) => x(i) + ',' + y(v)).join(' ') }));
		rates.forEach((v, i) => g.append(svg('circle', { cx: x(i), cy: y(v), r: 2, class: 'dot' },
						     svg('title', {}, (Math.round(v * 10) / 10) + '/s'))));
		g.setAttribute('data-points', rates.length);
		g.append(svg('text', { x: PAD, y: 12, class: 'axis' },
			     'max ' + (Math.round(max * 10) / 10) + '/s'));
		g.append(svg('text', { x: W - PAD, y: H - 4, 'text-anchor': 'end', class: 'axis' },
			     'last ' + dur(Math.max(0, s.length - 1) * gr.every_s * 1000 +
					   (gr.now_after_ms || 0))));
		$(id).replaceChildren(g);
	}

	function keyRow(k) {
		const tr = el('tr', { 'data-key': k.key, class: k.quarantined ? 'quarantined' : '' });
		const hold = el('td', { class: 'holders' });
		for (const h of k.holding)
			hold.append(el('span', { class: 'holder', 'data-pid': h.pid, 'data-name': h.name },
				       who(h), ' ', el('span', { class: 'tok' }, 'token ' + h.token), ', ',
				       granted(h),
				       h.lease_ms ? el('span', {}, ', lease ', clock(h.lease_ms, true, dur)) : null));
		if (k.holders > k.holding.length)
			hold.append(el('span', { class: 'muted' }, '+' + (k.holders - k.holding.length) + ' more'));
		if (!k.holders)
			hold.append(el('span', { class: 'muted' }, 'free'));
		const q = el('ol', { class: 'queue' });
		for (const w of k.queue)
			q.append(el('li', { class: 'waiter', 'data-pid': w.pid }, who(w), ', waiting ',
				    clock(w.waiting_ms, false, dur)));
		const qtd = el('td', {}, k.waiters ? q : el('span', { class: 'muted' }, '—'));
		if (k.waiters > k.queue.length)
			qtd.append(el('span', { class: 'muted' }, '+' + (k.waiters - k.queue.length) + ' more'));
		let delay = el('span', { class: 'muted' }, '—');
		if (k.delay_ms) {
			let why = '';
			if (k.delay_by)
				why = ' after ' + who(k.delay_by) + (k.delay_by.died ? ' died' :
					k.delay_by.session_end ? ' ended' : ' lost it');
			delay = el('span', { class: 'delay', 'data-ms': k.delay_ms },
				   'lock-delay ', clock(k.delay_ms, true, (ms) => (ms / 1000).toFixed(1) + ' s'),
				   why);
		}
		const kind = k.kind + (k.kind === 'semaphore' ? ' (' + k.limit + ')' : '') +
			(k.quarantined ? ', quarantined' : '');
		tr.append(el('td', { class: 'key' }, keyText(k.key)), el('td', {}, kind), hold, qtd,
			  el('td', {}, delay), el('td', {}, k.grants));
		return tr;
	}

	function fill(tbody, rows) {
		tbody.replaceChildren(...rows);
	}

	function render() {
		const d = st.data;
		const c = d.counters;
		$('broker').textContent = 'shmlockd ' + c.version + ', pid ' + c.broker_pid;
		const cs = [['keys', c.keys + ' / ' + c.max_keys], ['sessions', c.sessions + ' / ' + c.max_sessions],
			    ['holds', c.holds], ['waiters', c.waiters], ['grants', c.grants],
			    ['handoffs', c.handoffs], ['timeouts', c.timeouts],
			    ['lease expiries', c.lease_expiries], ['TTL expiries', c.ttl_expiries],
			    ['crash cleanups', c.crash_cleanups], ['repairs', c.repairs],
			    ['quarantined keys', c.quarantined_keys], ['sessions opened', c.sessions_opened],
			    ['sessions closed', c.sessions_closed]];
		$('counters').replaceChildren(...cs.map(([k, v]) => el('div', { 'data-counter': k },
			el('dt', {}, k), el('dd', {}, v))));
		const K = d.keys;
		$('keys-count').textContent = '(' + K.total + (K.total !== K.all ? ' of ' + K.all : '') + ')';
		fill($('keys').tBodies[0], K.rows.map(keyRow));
		const last = Math.min(K.offset + K.rows.length, K.total);
		$('page').textContent = K.total ? (K.offset + 1) + '–' + last + ' of ' + K.total : 'none';
		$('prev').disabled = K.offset === 0;
		$('next').disabled = last >= K.total;
		for (const th of document.querySelectorAll('th[data-sort]')) {
			th.classList.toggle('sorted-asc', th.dataset.sort === st.sort && st.dir === 'asc');
			th.classList.toggle('sorted-desc', th.dataset.sort === st.sort && st.dir === 'desc');
		}
		$('sessions-count').textContent = '(' + d.sessions.total + ')';
		fill($('sessions').tBodies[0], d.sessions.rows.map((s) => el('tr', { 'data-session': s.session },
			el('td', {}, s.name), el('td', {}, s.pid), el('td', {}, s.uid), el('td', {}, s.holds),
			el('td', {}, s.waiting),
			el('td', {}, s.ttl_ms ? clock(s.ttl_remaining_ms, true, dur) : '—'),
			el('td', {}, s.lock_delay_ms ? dur(s.lock_delay_ms) : '—'),
			el('td', { class: 'key' }, s.session))));
		$('leases-count').textContent = '(' + d.leases.total + ')';
		fill($('leases').tBodies[0], d.leases.rows.map((l) => el('tr', {},
			el('td', { class: 'key' }, keyText(l.key)), el('td', {}, l.name), el('td', {}, l.pid),
			el('td', {}, l.token), el('td', {}, clock(l.remaining_ms, true, dur)))));
		if (d.charts) {
			histChart('chart-wait', d.charts.wait);
			histChart('chart-hold', d.charts.hold);
			grantsChart('chart-grants', d.charts.grants);
		}
		$('quarantined').replaceChildren(...(d.quarantined.length ?
			d.quarantined.map((q) => el('li', { class: 'key' }, q)) :
			[el('li', { class: 'muted' }, 'none')]));
	}

	function status(text, cls) {
		$('status').textContent = text;
		$('status').className = 'status ' + (cls || '');
	}

	async function loop() {
		let last = 0;
		for (;;) {
			// At most 4 answers a second, however fast the segment
			// changes: a busy broker is not asked once per change.
			const wait = last + 250 - performance.now();
			if (st.stamp && wait > 0)
				await sleep(wait);
			last = performance.now();
			ctl = new AbortController();
			const p = new URLSearchParams({ q: st.q, sort: st.sort, dir: st.dir,
							offset: st.offset, limit: st.limit });
			if (st.stamp)
				p.set('since', st.stamp);
			try {
				const r = await fetch('/ui/api/state?' + p, { cache: 'no-store', signal: ctl.signal,
					headers: token ? { Authorization: 'Bearer ' + token } : {} });
				if (r.status === 401) {
					status('token needed: open /ui/#token=TOKEN', 'down');
					await sleep(5000);
					continue;
				}
				if (!r.ok)
					throw new Error('HTTP ' + r.status);
				const j = await r.json();
				st.stamp = j.stamp;
				st.data = j;
				st.got = performance.now();
				st.gotWall = Date.now();
				render();
				status('live', 'live');
			} catch (e) {
				if (e.name === 'AbortError')
					continue;
				status('disconnected (' + e.message + '), retrying', 'down');
				st.stamp = '';
				await sleep(2000);
			}
		}
	}

	// A new question: drop the long poll in flight and ask at once.
	function requery() {
		st.stamp = '';
		if (ctl)
			ctl.abort();
	}
	let searchTimer = 0;
	$('search').addEventListener('input', (ev) => {
		clearTimeout(searchTimer);
		searchTimer = setTimeout(() => { st.q = ev.target.value; st.offset = 0; requery(); }, 200);
	});
	$('limit').addEventListener('change', (ev) => { st.limit = Number(ev.target.value); st.offset = 0; requery(); });
	$('prev').addEventListener('click', () => { st.offset = Math.max(0, st.offset - st.limit); requery(); });
	$('next').addEventListener('click', () => { st.offset += st.limit; requery(); });
	for (const th of document.querySelectorAll('th[data-sort]'))
		th.addEventListener('click', () => {
			const s = th.dataset.sort;
			st.dir = st.sort === s && st.dir === 'asc' ? 'desc' : s === 'key' ? 'asc' : 'desc';
			st.sort = s;
			st.offset = 0;
			requery();
		});
	if (location.hash)  // the token stays in this tab's sessionStorage, not in the address bar
		history.replaceState(null, '', location.pathname + location.search);
	setInterval(tick, 250);
	loop();
})();
