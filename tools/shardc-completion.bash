# Bash completion for shardc (installed by `make install` as
# PREFIX/share/bash-completion/completions/shardc; or `source` this file).
# The commands, each command's options and their fixed values come from
# shardc itself (`shardc complete-options [COMMAND]`, printed from the
# tables its --help is printed from), and --fn's names from the program
# being compiled (`shardc complete-fns prog.tdsl`).

_shardc() {
    local cur prev words cword
    if declare -F _init_completion >/dev/null; then
        _init_completion -n = || return
    else
        cur=${COMP_WORDS[COMP_CWORD]}; prev=${COMP_WORDS[COMP_CWORD-1]}
        words=("${COMP_WORDS[@]}"); cword=$COMP_CWORD
    fi
    local shardc=${words[0]} cmd= file= i
    for ((i = 1; i < cword; i++)); do          # the command and the program, skipping option values
        case ${words[i]} in
            -o|--mesh|--const|--device-memory|--stage|--fn|--value|--format|--in|--out|--backend|--np|--steps|--log-every|--checkpoint|--checkpoint-every|--resume)
                ((i++)) ;;
            -*) ;;
            *) if [[ -z $cmd ]]; then cmd=${words[i]}; elif [[ -z $file ]]; then file=${words[i]}; fi ;;
        esac
    done
    if [[ -z $cmd ]]; then
        COMPREPLY=($(compgen -W "$("$shardc" complete-options 2>/dev/null)" -- "$cur"))
        return
    fi
    local opt=$prev value=$cur
    if [[ $cur == --*=* ]]; then opt=${cur%%=*}; value=${cur#*=}; fi
    local line values=
    while read -r line; do                      # "--stage= parsed sharded ...", "--check"
        local name=${line%% *}
        [[ ${name%=} == "$opt" && $line == *' '* ]] && values=${line#* }
    done < <("$shardc" complete-options "$cmd" 2>/dev/null)
    if [[ -n $values ]]; then
        COMPREPLY=($(compgen -W "$values" -- "$value"))
    elif [[ $opt == --fn && -n $file ]]; then
        COMPREPLY=($(compgen -W "$("$shardc" complete-fns "$file" 2>/dev/null)" -- "$value"))
    elif [[ $opt == --in || $opt == --out || $opt == -o ]]; then
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -- "$value"))
    elif [[ $opt == --*  && ( $cur == --*=* || $prev == --* ) ]] && \
         "$shardc" complete-options "$cmd" 2>/dev/null | grep -q -- "^$opt="; then
        COMPREPLY=()
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$("$shardc" complete-options "$cmd" 2>/dev/null | cut -d' ' -f1)" -- "$cur"))
        [[ ${COMPREPLY[0]} == *= ]] && compopt -o nospace 2>/dev/null
    elif [[ $cmd == help ]]; then
        COMPREPLY=($(compgen -W "$("$shardc" complete-options 2>/dev/null)" -- "$cur"))
    else
        compopt -o filenames 2>/dev/null
        COMPREPLY=($(compgen -f -X '!*.tdsl' -- "$cur") $(compgen -d -- "$cur"))
    fi
}
complete -F _shardc shardc
