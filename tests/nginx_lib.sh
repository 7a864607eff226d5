# nginx_lib.sh — for the shell tests that put the shipped deploy/nginx/attnd.conf in front of attnd
# instances on loopback. nginx_config needs proc_lib.sh's $T.
#
#   nginx_prereqs [TOOL...]
#       fails the test with a message unless the default model, nginx and every TOOL are there;
#       sets MODEL (the default model) and NGINX (its binary)
#   nginx_config PORT_A PORT_B PORT_NGINX [SED_EXPR...]
#       writes $T/attnd.conf (the shipped file, its example ports replaced by these, then the extra
#       sed expressions) and $T/nginx.conf (a foreground nginx, no master, everything under $T),
#       and checks them with nginx -t. Returns 1 with a message when a substitution is missing or
#       nginx -t fails. Run nginx with: "$NGINX" -p "$T" -e "$T/logs/error.log" -c "$T/nginx.conf"

nginx_prereqs() {
    : "${ATTND_BINARY:?}" "${ATTND_SOURCE_DIR:?}"
    MODEL="$ATTND_SOURCE_DIR/models/attnd-sotu.gguf"
    [ -f "$MODEL" ] || { echo "FAIL: $MODEL not found"; exit 1; }
    NGINX=$(command -v nginx || echo /usr/sbin/nginx)
    [ -x "$NGINX" ] || { echo "FAIL: nginx not installed (scripts/dev.sh test installs nginx-light)"; exit 1; }
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null || { echo "FAIL: $tool not installed (scripts/dev.sh test installs it)"; exit 1; }
    done
}

nginx_config() {
    local pa=$1 pb=$2 pn=$3 e want
    shift 3
    local extra=()
    for e in "$@"; do extra+=(-e "$e"); done
    chmod 755 "$T" # nginx workers may run as another user
    mkdir -p "$T/logs" "$T/tmp"
    chmod 777 "$T/tmp"
    sed -e "s/127\.0\.0\.1:8081/127.0.0.1:$pa/" -e "s/127\.0\.0\.1:8082/127.0.0.1:$pb/" \
        -e "s/listen 127\.0\.0\.1:8080;/listen 127.0.0.1:$pn;/" "${extra[@]}" \
        "$ATTND_SOURCE_DIR/deploy/nginx/attnd.conf" >"$T/attnd.conf"
    for want in "127.0.0.1:$pa " "127.0.0.1:$pb " "listen 127.0.0.1:$pn;"; do
        grep -q "$want" "$T/attnd.conf" || { echo "FAIL: could not substitute '$want' into deploy/nginx/attnd.conf"; return 1; }
    done
    cat >"$T/nginx.conf" <<CONF
daemon off;
master_process off;
worker_processes 1;
pid $T/nginx.pid;
error_log $T/logs/error.log warn;
events { worker_connections 512; }
http {
    access_log $T/logs/access.log;
    client_body_temp_path $T/tmp/body;
    proxy_temp_path $T/tmp/proxy;
    fastcgi_temp_path $T/tmp/fastcgi;
    uwsgi_temp_path $T/tmp/uwsgi;
    scgi_temp_path $T/tmp/scgi;
    include $T/attnd.conf;
}
CONF
    "$NGINX" -t -q -p "$T" -e "$T/logs/error.log" -c "$T/nginx.conf" 2>"$T/nginx-t.log" ||
        { cat "$T/nginx-t.log"; echo "FAIL: nginx -t"; return 1; }
}
