# Shell helpers to run a throwaway nginx on loopback (sourced by demo.sh and Benchmarks/run.sh).

# free_port: a TCP port on 127.0.0.1 nobody listens on.
free_port() {
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'
}

# make_test_ca DIR: a CA and a leaf for localhost / 127.0.0.1 (DIR/ca.pem, DIR/leaf.pem, DIR/leaf.key).
make_test_ca() {
    local d=$1
    printf 'basicConstraints=critical,CA:TRUE\nkeyUsage=critical,keyCertSign,cRLSign\n' > "$d/ca.ext"
    printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=DNS:localhost,IP:127.0.0.1\n' > "$d/leaf.ext"
    ( cd "$d" &&
      openssl ecparam -genkey -name prime256v1 -noout -out ca.key &&
      openssl req -new -key ca.key -subj "/CN=Porter Demo CA" -out ca.csr &&
      openssl x509 -req -in ca.csr -signkey ca.key -days 2 -extfile ca.ext -out ca.pem &&
      openssl ecparam -genkey -name prime256v1 -noout -out leaf.key &&
      openssl req -new -key leaf.key -subj "/CN=localhost" -out leaf.csr &&
      openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -extfile leaf.ext -out leaf.pem
    ) >/dev/null 2>&1
}

# start_nginx DIR ROOT HTTP_PORT HTTPS_PORT: serves ROOT over http and https (h2) with
# DIR's leaf certificate, one worker, until stop_nginx DIR.
start_nginx() {
    local d=$1 root=$2 port=$3 tls=$4
    mkdir -p "$d/tmp" "$d/logs"
    cat > "$d/nginx.conf" <<CONF
daemon off;
worker_processes 1;
pid $d/nginx.pid;
error_log $d/logs/error.log;
events { worker_connections 1024; }
http {
    access_log off;
    sendfile on;
    keepalive_requests 100000;
    default_type application/octet-stream;
    types { text/html html; text/plain txt; application/json json; }
    client_body_temp_path $d/tmp/body; proxy_temp_path $d/tmp/proxy; fastcgi_temp_path $d/tmp/fcgi;
    uwsgi_temp_path $d/tmp/uwsgi; scgi_temp_path $d/tmp/scgi;
    server { listen 127.0.0.1:$port; root $root; location = /moved { return 301 /hello.txt; }
             location /cacheable/ { add_header Cache-Control "max-age=600"; } }
    server { listen 127.0.0.1:$tls ssl http2; root $root;
             ssl_certificate $d/leaf.pem; ssl_certificate_key $d/leaf.key; }
}
CONF
    chmod -R a+rX "$d" "$root"
    nginx -p "$d" -c "$d/nginx.conf" -e "$d/logs/stderr.log" &
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && (exec 3<>"/dev/tcp/127.0.0.1/$tls") 2>/dev/null && return 0
        sleep 0.05
    done
    echo "nginx did not start:" >&2; cat "$d/logs/stderr.log" >&2
    return 1
}

stop_nginx() {
    [ -f "$1/nginx.pid" ] && kill -QUIT "$(cat "$1/nginx.pid")" 2>/dev/null
    return 0
}
