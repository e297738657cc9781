// What Proxmox VE's console pages get from pveproxy and its login: the
// user name and CSRF token (pveproxy renders them into the page; here the
// login page keeps them in sessionStorage), an API helper that behaves
// like the one in novnc-pve's app/pve.js and pve-xtermjs's util.js (form
// posts with the CSRFPreventionToken header, answers accepted only as
// 200 with PVE's "application/json;charset=UTF-8"), and a status line.
"use strict";

var PVE = {
	UserName: sessionStorage.getItem("pve-username") || "",
	CSRFPreventionToken: sessionStorage.getItem("pve-csrf") || "",
};

function urlEncode(params) {
	return Object.keys(params || {})
		.map((k) => encodeURIComponent(k) + "=" + encodeURIComponent(String(params[k] ?? "")))
		.join("&");
}

function getQueryParameter(name) {
	return new URLSearchParams(location.search).get(name) || "";
}

// API2Request calls /api2/json<url>; success gets the decoded answer,
// failure a message such as "Error 401: Authentication failed!".
function API2Request({ method = "GET", url, params, success, failure }) {
	const xhr = new XMLHttpRequest();
	const data = urlEncode(params);
	xhr.open(method, "/api2/json" + url + (method === "GET" && data ? "?" + data : ""));
	xhr.setRequestHeader("Cache-Control", "no-cache");
	xhr.onload = () => {
		const ctype = xhr.getResponseHeader("Content-Type") || "";
		if (xhr.status !== 200) {
			failure("Error " + xhr.status + ": " + xhr.statusText);
		} else if (!/application\/json;/.test(ctype)) {
			failure("got unexpected content type " + ctype);
		} else {
			success(JSON.parse(xhr.responseText));
		}
	};
	xhr.onerror = () => failure("Connection error - server offline?");
	if (method === "POST" || method === "PUT") {
		xhr.setRequestHeader("Content-Type", "application/x-www-form-urlencoded");
		xhr.setRequestHeader("CSRFPreventionToken", PVE.CSRFPreventionToken);
		xhr.send(data);
	} else {
		xhr.send();
	}
}

// showStatus puts a message in the status line (severity: normal,
// warning or error).
function showStatus(text, severity) {
	const el = document.getElementById("status");
	el.textContent = text;
	el.className = severity || "normal";
}

// consoleBase is the API path of the guest the page's query names
// (console=kvm|lxc, node, vmid), as both wrappers build it.
function consoleBase() {
	const kind = getQueryParameter("console") === "lxc" ? "lxc" : "qemu";
	return "/nodes/" + getQueryParameter("node") + "/" + kind + "/" + getQueryParameter("vmid");
}

// websocketURL is vncwebsocket on this origin for a vncproxy or termproxy
// answer.
function websocketURL(base, data) {
	const proto = location.protocol === "https:" ? "wss://" : "ws://";
	return proto + location.host + "/api2/json" + base + "/vncwebsocket?" + urlEncode({ port: data.port, vncticket: data.ticket });
}
