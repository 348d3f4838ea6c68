# source_state.cmake - record the state of the source tree at BUILD time as a
# C header, rewritten only when its content changes (so an unchanged tree
# rebuilds nothing).  Run as a script on every build (top-level CMakeLists.txt,
# target ls_source_state):
#   cmake -DLS_SOURCE_DIR=src -DLS_STATE_DIR=dir -DLS_OUT=header.h
#         [-DLS_EXCLUDE=path] [-DGIT_EXECUTABLE=git] -P source_state.cmake
#
# The header defines
#   LS_SOURCE_COMMIT          HEAD's commit id, "unknown" outside a git work tree
#   LS_SOURCE_DIRTY           0 when the tree equals HEAD, else 1 (1 outside git)
#   LS_SOURCE_CHANGES_SHA256  SHA-256 (hex) of the list of uncommitted changes,
#                             "" outside git (recorded as null)
#
# The list of changes: the working tree as `git add -A` would record it
# (tracked files with their uncommitted edits, staged or not, deletions, mode
# changes, and untracked files that .gitignore does not ignore) is written as
# a git tree, and the list is `git diff-tree -r --raw --no-renames --no-abbrev`
# from HEAD's tree to that tree: one line per changed path with both modes and
# both blob ids (content hashes).  A clean tree gives the empty list (its
# SHA-256 is e3b0c442...).  The repository is not written to: the index used is
# a copy in LS_STATE_DIR and new objects go to LS_STATE_DIR/objects, with the
# repository's objects as an alternate.  LS_EXCLUDE (the build tree, when it
# lies inside the sources) is left out of the untracked files.
cmake_minimum_required(VERSION 3.18)

foreach(v LS_SOURCE_DIR LS_STATE_DIR LS_OUT)
  if(NOT DEFINED ${v})
    message(FATAL_ERROR "source_state.cmake: -D${v}=... is required")
  endif()
endforeach()
if(NOT GIT_EXECUTABLE)
  set(GIT_EXECUTABLE git)
endif()
get_filename_component(src "${LS_SOURCE_DIR}" REALPATH)
get_filename_component(state "${LS_STATE_DIR}" ABSOLUTE)

# git in the source tree; output stripped; sets ${out} and ${out}_RC
function(ls_git out)
  execute_process(COMMAND "${GIT_EXECUTABLE}" ${ARGN}
                  WORKING_DIRECTORY "${src}"
                  RESULT_VARIABLE rc OUTPUT_VARIABLE o ERROR_VARIABLE e
                  OUTPUT_STRIP_TRAILING_WHITESPACE)
  set(${out} "${o}" PARENT_SCOPE)
  set(${out}_RC "${rc}" PARENT_SCOPE)
  set(${out}_ERR "${e}" PARENT_SCOPE)
endfunction()

set(commit "unknown")
set(dirty 1)
set(changes "")

ls_git(top rev-parse --show-toplevel)
set(in_git FALSE)
if(top_RC EQUAL 0)
  get_filename_component(top "${top}" REALPATH)
  # a source tree unpacked inside some other repository is not that repository
  if(top STREQUAL src)
    set(in_git TRUE)
  endif()
endif()

if(in_git)
  ls_git(head rev-parse --verify -q HEAD)
  if(head_RC EQUAL 0)
    set(commit "${head}")
    ls_git(base rev-parse --verify -q "HEAD^{tree}")
  else()
    # no commit yet: every file is a change against the empty tree
    execute_process(COMMAND "${GIT_EXECUTABLE}" hash-object -t tree --stdin
                    WORKING_DIRECTORY "${src}" INPUT_FILE /dev/null
                    OUTPUT_VARIABLE base OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE base_RC)
  endif()
  ls_git(index rev-parse --git-path index)
  ls_git(objects rev-parse --git-path objects)
  get_filename_component(index "${index}" ABSOLUTE BASE_DIR "${src}")
  get_filename_component(objects "${objects}" ABSOLUTE BASE_DIR "${src}")

  # a private index and object store: the repository stays untouched
  file(REMOVE_RECURSE "${state}")
  file(MAKE_DIRECTORY "${state}/objects")
  set(ENV{GIT_INDEX_FILE} "${state}/index")
  set(ENV{GIT_OBJECT_DIRECTORY} "${state}/objects")
  set(ENV{GIT_ALTERNATE_OBJECT_DIRECTORIES} "${objects}")
  if(EXISTS "${index}" AND head_RC EQUAL 0)
    # a copy of the index keeps git's stat cache: only edited files are hashed
    execute_process(COMMAND "${CMAKE_COMMAND}" -E copy "${index}" "${state}/index")
  elseif(head_RC EQUAL 0)
    ls_git(read read-tree HEAD)
  endif()

  set(pathspec ":(top)")
  if(LS_EXCLUDE)
    get_filename_component(ex "${LS_EXCLUDE}" ABSOLUTE)
    file(RELATIVE_PATH rel "${src}" "${ex}")
    if(NOT rel MATCHES "^\\.\\.(/|$)" AND NOT rel STREQUAL "" AND NOT IS_ABSOLUTE "${rel}")
      # naming an ignored path is an error to `git add`: exclude it only when not ignored
      ls_git(ignored check-ignore -q -- "${rel}/")
      if(NOT ignored_RC EQUAL 0)
        list(APPEND pathspec ":(top,exclude)${rel}")
      endif()
    endif()
  endif()
  ls_git(added add -A -- ${pathspec})
  ls_git(tree write-tree)
  if(NOT added_RC EQUAL 0 OR NOT tree_RC EQUAL 0 OR NOT base_RC EQUAL 0)
    message(WARNING "source_state.cmake: git could not record the working tree "
                    "(${added_ERR}${tree_ERR}); recording the source state as unknown")
    set(commit "unknown")
  else()
    ls_git(list -c core.quotepath=on diff-tree -r --raw --no-renames --no-abbrev "${base}" "${tree}")
    if(NOT list_RC EQUAL 0)
      message(WARNING "source_state.cmake: git diff-tree failed (${list_ERR})")
      set(commit "unknown")
    else()
      string(SHA256 changes "${list}")
      if(list STREQUAL "")
        set(dirty 0)
      endif()
    endif()
  endif()
  file(REMOVE_RECURSE "${state}")
  if(commit STREQUAL "unknown")
    set(dirty 1)
    set(changes "")
  endif()
endif()

set(text "/* generated by cmake/source_state.cmake at build time: do not edit */
#define LS_SOURCE_COMMIT \"${commit}\"
#define LS_SOURCE_DIRTY ${dirty}
#define LS_SOURCE_CHANGES_SHA256 \"${changes}\"
")
set(old "")
if(EXISTS "${LS_OUT}")
  file(READ "${LS_OUT}" old)
endif()
if(NOT old STREQUAL text)
  get_filename_component(dir "${LS_OUT}" DIRECTORY)
  file(MAKE_DIRECTORY "${dir}")
  file(WRITE "${LS_OUT}.tmp" "${text}")
  file(RENAME "${LS_OUT}.tmp" "${LS_OUT}")
endif()
